package framework

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	err := WaitFor(t.Context(), 5*time.Second, func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("WaitFor = %v after %d calls, want nil after 3", err, calls)
	}
}

func TestWaitForReportsTheLastError(t *testing.T) {
	err := WaitFor(t.Context(), 300*time.Millisecond, func(context.Context) error { return errors.New("still 2 pods") })
	if err == nil || !strings.Contains(err.Error(), "still 2 pods") {
		t.Fatalf("WaitFor = %v, want the condition's last error", err)
	}
}

func TestWaitForStopsAtOnce(t *testing.T) {
	began := time.Now()
	calls := 0
	err := WaitFor(t.Context(), 10*time.Second, func(context.Context) error {
		calls++
		return Stop(errors.New("server exited"))
	})
	if err == nil || !strings.Contains(err.Error(), "server exited") || calls != 1 || time.Since(began) > 5*time.Second {
		t.Fatalf("WaitFor = %v after %d calls and %s, want the Stop error at once", err, calls, time.Since(began))
	}
}

// recorder is a testing.TB whose Fatalf records instead of stopping.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
}

func TestConsistentlyFailsAtTheFirstError(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	Consistently(r, 10*time.Second, "nothing deleted", func(context.Context) error {
		calls++
		if calls == 3 {
			return errors.New("deleted")
		}
		return nil
	})
	if r.failed == "" || calls != 3 {
		t.Fatalf("Consistently failed=%q after %d calls, want a failure at call 3", r.failed, calls)
	}
}

func TestConsistentlyChecksThroughout(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	began := time.Now()
	Consistently(r, 500*time.Millisecond, "holds", func(context.Context) error { calls++; return nil })
	if r.failed != "" || calls < 4 || time.Since(began) < 500*time.Millisecond {
		t.Fatalf("Consistently failed=%q, %d calls in %s: want no failure, polling for the whole 500ms", r.failed, calls, time.Since(began))
	}
}
