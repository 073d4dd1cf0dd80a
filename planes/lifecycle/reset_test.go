package lifecycle

import (
	"context"
	"errors"
	"testing"
)

// A reset request and the reconcile of the Plane it marked both finish the
// reset; the one that finds the other at work answers with the other's
// result once it ends, never before the plane is reset.
func TestFinishResetWaitsForTheRunningOne(t *testing.T) {
	run := &resetRun{done: make(chan struct{})}
	m := &Manager{state: map[string]*state{"p": {resetRun: run}}}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.finishReset(ctx, "p"); !errors.Is(err, context.Canceled) {
		t.Fatalf("finishReset while another runs, caller gone: %v, want it to wait and end with its context", err)
	}

	failed := errors.New("wiping failed")
	run.err = failed
	close(run.done)
	if err := m.finishReset(context.Background(), "p"); !errors.Is(err, failed) {
		t.Fatalf("finishReset after the running one failed: %v, want its error", err)
	}
}
