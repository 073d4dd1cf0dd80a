package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"kplane.dev/kplane/test/e2e/framework"
)

// shared is one server (default SQLite datastore) used by every test that
// does not need a server of its own: starting kplane costs seconds, a new
// plane costs milliseconds.
var shared *framework.Server

func TestMain(m *testing.M) {
	// Without a binary nothing here can run, and exiting 0 would let
	// `go test ./...` report ok for a suite that never ran.
	if _, err := framework.Binary(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL:", err)
		os.Exit(1)
	}
	s, err := framework.Start(framework.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting shared kplane:", err)
		if s != nil {
			fmt.Fprintln(os.Stderr, s.Log())
			s.Cleanup()
		}
		os.Exit(1)
	}
	shared = s
	code := m.Run()
	if code != 0 {
		// One failing client can fill the tail with the same line; the
		// server's warnings and errors, each once, say what happened.
		log := s.Log()
		fmt.Fprintln(os.Stderr, "--- shared server's warnings and errors, each message once ---")
		fmt.Fprintln(os.Stderr, framework.DistinctProblems(log, 20000))
		fmt.Fprintln(os.Stderr, "--- shared server log (tail) ---")
		if len(log) > 20000 {
			log = log[len(log)-20000:]
		}
		fmt.Fprintln(os.Stderr, log)
		s.Stop()
		fmt.Fprintln(os.Stderr, "the shared server's data dir and log are kept in", s.DataDir)
		os.Exit(code)
	}
	s.Cleanup()
	os.Exit(code)
}

// uniquePlane returns a plane id not used by any other test.
func uniquePlane(t *testing.T, prefix string) string {
	t.Helper()
	return fmt.Sprintf("%s-%d", prefix, planeSeq.Add(1))
}

// eventually is framework.Eventually for a condition written as (done,
// error): it polls until done, and fails with what and the last error.
// timeout is raised to framework.DefaultTimeout: a shorter wait only makes
// a test flaky when many run in parallel on a few cores.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	framework.Eventually(t, max(timeout, framework.DefaultTimeout), what, func(context.Context) error {
		done, err := cond()
		switch {
		case done:
			return nil
		case err != nil:
			return err
		default:
			return errors.New("condition not met")
		}
	})
}

// gone is a condition of eventually: done when err is NotFound.
func gone(err error) (bool, error) {
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err == nil {
		return false, errors.New("still exists")
	}
	return false, err
}
