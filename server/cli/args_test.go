package cli

import (
	"reflect"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestFlagsAnywhere(t *testing.T) {
	app := &cli.App{Commands: []*cli.Command{PlanesCommand(), KubeconfigCommand()}}
	for _, c := range []struct{ in, want []string }{
		{[]string{"kplane", "planes", "create", "b", "--from", "a"}, []string{"kplane", "planes", "create", "--from", "a", "b"}},
		{[]string{"kplane", "planes", "create", "--data-dir", "d", "b", "--template=t"}, []string{"kplane", "planes", "create", "--data-dir", "d", "--template=t", "b"}},
		{[]string{"kplane", "planes", "list"}, []string{"kplane", "planes", "list"}},
		{[]string{"kplane", "planes", "create", "b", "--", "--from"}, []string{"kplane", "planes", "create", "b", "--", "--from"}},
		{[]string{"kplane", "unknown", "x", "--y"}, []string{"kplane", "unknown", "x", "--y"}},
		{[]string{"kplane"}, []string{"kplane"}},
	} {
		if got := FlagsAnywhere(app, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("FlagsAnywhere(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
