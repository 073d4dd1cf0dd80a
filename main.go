// Command kplane runs thousands of isolated Kubernetes control planes in one
// process. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"kplane.dev/kplane/server"
	kplanecli "kplane.dev/kplane/server/cli"
	"kplane.dev/kplane/server/logging"
	"kplane.dev/kplane/server/version"
)

func main() {
	app := &cli.App{
		Name:    "kplane",
		Usage:   "thousands of isolated Kubernetes control planes in one process",
		Version: version.Version,
		Commands: []*cli.Command{
			serverCommand(),
			kplanecli.KubeconfigCommand(),
			kplanecli.PlanesCommand(),
			kplanecli.HealthcheckCommand(),
			kplanecli.SnapshotCommand(),
			kplanecli.AuditCommand(),
		},
	}
	cli.VersionPrinter = func(*cli.Context) { fmt.Println(version.String()) }
	if err := app.Run(kplanecli.FlagsAnywhere(app, os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "kplane:", err)
		os.Exit(1)
	}
}

func serverCommand() *cli.Command {
	o := server.NewOptions()
	return &cli.Command{
		Name:  "server",
		Usage: "run the datastore and the multi-plane apiserver",
		Flags: o.Flags(),
		Action: func(c *cli.Context) error {
			if err := logging.Setup(logging.Options{Level: o.LogLevel, Format: o.LogFormat, Verbosity: o.Verbosity}); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runServer(ctx, o)
		},
	}
}

func runServer(ctx context.Context, o *server.Options) error {
	config, err := o.Config()
	if err != nil {
		return err
	}
	completed, err := config.Complete(ctx)
	if err != nil {
		return err
	}
	s, err := completed.New(ctx)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}
