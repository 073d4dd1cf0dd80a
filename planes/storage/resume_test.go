package storage

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

// Only the watch cache's 410 for a resourceVersion older than its history
// sends a watch to the datastore: a compacted revision's 410 (from the
// datastore) and other errors are the client's to see.
func TestBeyondCacheHistory(t *testing.T) {
	status := func(err *apierrors.StatusError) watch.Event {
		return watch.Event{Type: watch.Error, Object: &err.ErrStatus}
	}
	cases := map[string]struct {
		ev   watch.Event
		want bool
	}{
		"cache history": {status(apierrors.NewResourceExpired("too old resource version: 297 (298)")), true},
		"compacted":     {status(apierrors.NewResourceExpired("The resourceVersion for the provided watch is too old.")), false},
		"internal":      {status(apierrors.NewInternalError(errors.New("boom"))), false},
		"an object":     {watch.Event{Type: watch.Added, Object: &unstructured.Unstructured{}}, false},
		"not a Status":  {watch.Event{Type: watch.Error, Object: &unstructured.Unstructured{}}, false},
	}
	for name, c := range cases {
		if got := beyondCacheHistory(c.ev); got != c.want {
			t.Errorf("%s: beyondCacheHistory = %v, want %v", name, got, c.want)
		}
	}
}

// A watch whose first event was taken to be looked at delivers it first,
// then the rest, and stopping it stops the watch it forwards.
func TestPrependedDeliversTheTakenEventFirst(t *testing.T) {
	inner := watch.NewFake()
	first := watch.Event{Type: watch.Added, Object: &metav1.Status{Message: "first"}}
	w := prepended(first, inner)
	go inner.Modify(&metav1.Status{Message: "second"})
	for _, want := range []string{"first", "second"} {
		select {
		case ev := <-w.ResultChan():
			if got := ev.Object.(*metav1.Status).Message; got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %q", want)
		}
	}
	w.Stop()
	if !inner.IsStopped() {
		t.Fatal("stopping the watch left the forwarded one running")
	}
	select {
	case _, open := <-w.ResultChan():
		if open {
			t.Fatal("an event after Stop")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the result channel stayed open after Stop")
	}
	w.Stop() // a second Stop is harmless
}
