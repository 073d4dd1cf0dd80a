package cli

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// FlagsAnywhere returns args with the flags of the command they name moved
// ahead of its arguments, so that `kplane planes create b --from a` means
// what kubectl users expect: urfave/cli stops reading flags at a command's
// first argument and would take `--from` for a second plane id. Everything
// after "--" stays as it is.
func FlagsAnywhere(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	commands := app.Commands
	var flags []cli.Flag
	i := 1
	for ; i < len(args); i++ {
		cmd := findCommand(commands, args[i])
		if cmd == nil {
			break
		}
		out = append(out, args[i])
		commands, flags = cmd.Subcommands, cmd.Flags
	}
	if i == 1 {
		// No command named: the parser's own error says it best.
		return args
	}
	var flagArgs, positional []string
	rest := args[i:]
	for j := 0; j < len(rest); j++ {
		arg := rest[j]
		switch {
		case arg == "--":
			positional = append(positional, rest[j:]...)
			j = len(rest)
		case arg == "-" || !strings.HasPrefix(arg, "-"):
			positional = append(positional, arg)
		default:
			flagArgs = append(flagArgs, arg)
			if !strings.Contains(arg, "=") && takesValue(flags, strings.TrimLeft(arg, "-")) && j+1 < len(rest) {
				j++
				flagArgs = append(flagArgs, rest[j])
			}
		}
	}
	return append(append(out, flagArgs...), positional...)
}

func findCommand(commands []*cli.Command, name string) *cli.Command {
	for _, c := range commands {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether the flag called name reads the next argument
// as its value; an unknown flag is left for the parser to refuse.
func takesValue(flags []cli.Flag, name string) bool {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*cli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}
