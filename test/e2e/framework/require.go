package framework

import (
	"os/exec"
	"testing"
)

// Require fails the test when a prerequisite is missing: `make test` must
// not pass by testing less on a machine that lacks a tool. missing says what
// is missing and how to install it (.ci/run installs every prerequisite).
// Only a platform that cannot run a test at all may skip it, with t.Skip and
// a message saying so.
func Require(tb testing.TB, ok bool, missing string) {
	tb.Helper()
	if !ok {
		tb.Fatalf("missing prerequisite: %s", missing)
	}
}

// RequireCommand returns the path of command name, failing the test (via
// Require) when it is not on $PATH; install says how to get it.
func RequireCommand(tb testing.TB, name, install string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	Require(tb, err == nil, name+" is not on $PATH ("+install+")")
	return path
}
