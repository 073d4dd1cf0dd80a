package lifecycle

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A plane loaded by a request before the manager runs (Load, before every
// Plane is known) may already be being deleted, or held for another
// server's reset. Telling the other servers (drained, held) needs the
// running manager: it is left to the informer's look at the same Plane
// once the manager runs, and done once.
func TestDeletionToldOnceTheManagerRuns(t *testing.T) {
	m := observingManager()
	deleting := &unstructured.Unstructured{}
	deleting.SetName("p")
	deleting.SetUID("uid-1")
	deleting.SetResourceVersion("7")
	now := metav1.Now()
	deleting.SetDeletionTimestamp(&now)

	m.observe(deleting)
	if s := m.state["p"]; s == nil || !s.terminating || s.toldDeleting {
		t.Fatalf("loaded before the manager runs: %+v, want terminating and not told yet", s)
	}

	// Ended at once: the drain it starts returns without telling anyone.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.running.Store(&ctx)
	m.observe(deleting)
	if s := m.state["p"]; !s.toldDeleting {
		t.Fatal("seen again once the manager runs: the deletion's drain was not started")
	}
}

func TestHoldToldOnceTheManagerRuns(t *testing.T) {
	m := observingManager()
	marked := &unstructured.Unstructured{}
	marked.SetName("p")
	marked.SetUID("uid-1")
	marked.SetResourceVersion("7")
	marked.SetAnnotations(map[string]string{ResetAnnotation: resetMark{at: time.Now(), server: "s2"}.String()})

	m.observe(marked)
	if s := m.state["p"]; s == nil || !s.resetting || s.heldForMarkAt != 7 || s.toldHeldAt != 0 || m.held["p"] == nil {
		t.Fatalf("loaded before the manager runs: %+v, held %v; want held for the reset, not told yet", s, m.held["p"] != nil)
	}
	hold := m.held["p"]

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.running.Store(&ctx)
	m.observe(marked)
	if s := m.state["p"]; s.toldHeldAt != 7 || m.held["p"] != hold {
		t.Fatalf("seen again once the manager runs: told at %d, same hold %v; want told at 7 with the same hold", s.toldHeldAt, m.held["p"] == hold)
	}
}

// observingManager is a manager of server s1, sharing its datastore, that
// has not started running: what observe needs and nothing more.
func observingManager() *Manager {
	return &Manager{
		config:     Config{ServerName: "s1"},
		state:      map[string]*state{},
		dependents: map[string]map[string]struct{}{},
		held:       map[string]*resetHold{},
		requests:   newTracker(),
	}
}
