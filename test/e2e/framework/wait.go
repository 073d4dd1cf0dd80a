package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TimeoutEnv overrides DefaultTimeout, as a Go duration ("90s", "2m").
const TimeoutEnv = "KPLANE_E2E_TIMEOUT"

// PollInterval is how often Eventually and Consistently check their
// condition.
const PollInterval = 100 * time.Millisecond

// DefaultTimeout is how long a test waits for the server to do something
// asynchronous (a controller reacting, a cache catching up). The e2e tests
// run in parallel on one server and share a few cores, so a wait that takes
// milliseconds alone can take seconds under load: the default is generous,
// and a slow machine raises it with $KPLANE_E2E_TIMEOUT rather than by
// editing tests.
var DefaultTimeout = timeoutFromEnv(30 * time.Second)

func timeoutFromEnv(def time.Duration) time.Duration {
	v := os.Getenv(TimeoutEnv)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		// A typo must not silently shorten every wait.
		panic(fmt.Sprintf("%s=%q: want a positive Go duration such as 90s", TimeoutEnv, v))
	}
	return d
}

// WaitFor polls cond until it returns nil and returns nil, or returns the
// last error once timeout has passed or ctx is done. It is Eventually for
// code that has no testing.TB (TestMain, start-up) or must not stop the
// test goroutine.
func WaitFor(ctx context.Context, timeout time.Duration, cond func(context.Context) error) error {
	// last is what the last look that ran to its end said: the one the
	// deadline cut short says only that (a request cancelled), not what
	// was still awaited.
	var last error
	err := wait.PollUntilContextTimeout(ctx, PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		got := cond(ctx)
		if got != nil && ctx.Err() != nil && last != nil {
			return false, nil
		}
		last = got
		var stop stopError
		if errors.As(last, &stop) {
			return false, stop.err
		}
		return last == nil, nil
	})
	if err == nil {
		return nil
	}
	var stop stopError
	if errors.As(last, &stop) {
		return stop.err
	}
	if last != nil {
		return fmt.Errorf("not within %s: %w", timeout, last)
	}
	return fmt.Errorf("not within %s: %w", timeout, err)
}

// Stop wraps an error that makes Eventually and WaitFor give up at once
// instead of polling on (the condition can no longer come true, e.g. the
// server exited).
func Stop(err error) error { return stopError{err: err} }

type stopError struct{ err error }

func (s stopError) Error() string { return s.err.Error() }
func (s stopError) Unwrap() error { return s.err }

// Eventually polls cond every PollInterval until it returns nil, and fails
// the test with what and cond's last error when that does not happen within
// timeout (use DefaultTimeout unless the wait is known to take longer).
// cond returns an error saying what it is still waiting for; it returns
// Stop(err) to fail at once. It waits on tb.Context(), so it cannot be used
// in a t.Cleanup function (use WaitFor there).
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func(context.Context) error) {
	tb.Helper()
	if err := WaitFor(tb.Context(), timeout, cond); err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
}

// Consistently checks, every PollInterval for the whole of d, that cond
// still returns nil, and fails the test with what at the first error. It is
// how a test asserts that something does not happen (no event arrives, an
// object is not deleted): by watching for it throughout, not by sleeping and
// looking once.
func Consistently(tb testing.TB, d time.Duration, what string, cond func(context.Context) error) {
	tb.Helper()
	ctx := tb.Context()
	start := time.Now()
	deadline := start.Add(d)
	ticker := time.NewTicker(PollInterval)
	defer ticker.Stop()
	for {
		if err := cond(ctx); err != nil {
			tb.Fatalf("%s: stopped holding after %s: %v", what, time.Since(start).Round(time.Millisecond), err)
			return
		}
		if !time.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("%s: %v", what, ctx.Err())
			return
		case <-ticker.C:
		}
	}
}
