package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A reset request and the reconcile of the Plane it marked both finish the
// reset; the one that finds the other at work answers with the other's
// result once it ends, never before the plane is reset.
func TestFinishResetWaitsForTheRunningOne(t *testing.T) {
	run := &resetRun{done: make(chan struct{})}
	m := &Manager{state: map[string]*state{"p": {resetRun: run}}}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.finishReset(ctx, "p", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("finishReset while another runs, caller gone: %v, want it to wait and end with its context", err)
	}

	failed := errors.New("wiping failed")
	run.err = failed
	close(run.done)
	if err := m.finishReset(context.Background(), "p", 1); !errors.Is(err, failed) {
		t.Fatalf("finishReset after the running one failed: %v, want its error", err)
	}
}

// A reset is left to the server that marked it, until resetTakeover after
// it began; this server's own mark, or one naming no server (written by an
// older kplane), is finished at once.
func TestResetLeftToItsServer(t *testing.T) {
	m := &Manager{config: Config{ServerName: "s1"}}
	marked := func(value string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAnnotations(map[string]string{ResetAnnotation: value})
		return u
	}
	now := time.Now()
	for _, tc := range []struct {
		mark    string
		atLeast time.Duration
		atMost  time.Duration
		what    string
	}{
		{resetMark{at: now, server: "s1"}.String(), 0, 0, "its own"},
		{now.UTC().Format(time.RFC3339Nano), 0, 0, "an older kplane's"},
		{resetMark{at: now, server: "s2"}.String(), resetTakeover - time.Minute, resetTakeover, "another server's, just begun"},
		{resetMark{at: now.Add(-2 * resetTakeover), server: "s2"}.String(), 0, 0, "another server's, long ago"},
	} {
		if got := m.resetLeftTo(marked(tc.mark)); got < tc.atLeast || got > tc.atMost {
			t.Errorf("%s mark %q: left %s, want %s..%s", tc.what, tc.mark, got, tc.atLeast, tc.atMost)
		}
	}
}

// A reconcile that saw a Plane marked for a reset that has finished since
// (its informer copy was older than the reset's end) does not reset the
// plane again: a second wipe would delete what was written after the
// first. The manager here has no request tracker: going on would panic.
func TestFinishResetSkipsAResetFinishedSince(t *testing.T) {
	m := &Manager{state: map[string]*state{"p": {resetDoneAt: 10}}}
	if err := m.finishReset(context.Background(), "p", 9); err != nil {
		t.Fatalf("finishReset of a mark older than the last finished reset: %v", err)
	}
}

// A server holding a plane for another server's reset lets its requests
// in when the reset ends, but not while a reset begun since holds the
// plane with the same hold: that reset's end lets them in.
func TestHoldForAnotherServersResetEnds(t *testing.T) {
	newManager := func() (*Manager, *state, *int) {
		released := 0
		s := &state{resetting: true, heldForMarkAt: 5}
		m := &Manager{state: map[string]*state{"p": s},
			held: map[string]*resetHold{"p": {release: func() { released++ }}}}
		return m, s, &released
	}
	ended := &unstructured.Unstructured{}
	ended.SetName("p")
	ended.SetResourceVersion("9")

	m, s, released := newManager()
	m.releaseResetHold(ended)
	if *released != 1 || m.held["p"] != nil || s.resetting || s.resetDoneAt != 9 {
		t.Fatalf("after the reset's end: released %d times, still held %v, resetting %v, done at %d",
			*released, m.held["p"] != nil, s.resetting, s.resetDoneAt)
	}

	// The caches' wait ends while a reset begun since holds the plane (its
	// mark seen again, or a reset through this server): the hold stays.
	m, s, released = newManager()
	h := m.held["p"]
	s.resetting, s.heldForMarkAt = true, 12
	m.letInAfterReset("p", s, h)
	if *released != 0 || m.held["p"] != h {
		t.Fatalf("while a new reset holds the plane: released %d times, hold kept %v", *released, m.held["p"] == h)
	}
	s.resetting, s.heldForMarkAt = false, 0
	m.letInAfterReset("p", s, h)
	if *released != 1 || m.held["p"] != nil {
		t.Fatalf("once no reset holds the plane: released %d times, still held %v", *released, m.held["p"] != nil)
	}
}
