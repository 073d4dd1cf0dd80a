package fairness

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/endpoints/request"
)

// guard bounds waits that must end at once when the code is right; it
// measures nothing.
const guard = 10 * time.Second

var get = &request.RequestInfo{Verb: "get"}

// hold seats a request of plane that runs until release is closed; started
// is closed once it runs.
func hold(t *testing.T, q *Queue, wg *sync.WaitGroup, plane string, release <-chan struct{}) (started chan struct{}) {
	t.Helper()
	started = make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.serve(context.Background(), plane, get, func() {
			close(started)
			<-release
		})
	}()
	return started
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("%s did not happen", what)
	}
}

// TestPlaneCannotHoldEverySeat: requests of one plane that block while
// seated leave seats to other planes, and the plane's state goes when its
// requests end.
func TestPlaneCannotHoldEverySeat(t *testing.T) {
	q, err := New(Config{Seats: 2})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var wg sync.WaitGroup
	first := hold(t, q, &wg, "a", release)
	waitClosed(t, first, "a's first request seated")
	second := hold(t, q, &wg, "a", release)

	served := make(chan struct{})
	go func() {
		if !q.serve(context.Background(), "b", get, func() {}) {
			t.Error("b refused")
		}
		close(served)
	}()
	waitClosed(t, served, "b served while a's requests block")
	select {
	case <-second:
		t.Fatal("a holds both seats")
	default:
	}
	close(release)
	waitClosed(t, second, "a's second request seated once its first ended")
	wg.Wait()
	if n := q.perPlane.planes(); n != 0 {
		t.Fatalf("%d idle planes still hold state", n)
	}
}

// TestQueueWaitRefuses: a request that waits past QueueWait is refused
// (the filter answers 429), not run late.
func TestQueueWaitRefuses(t *testing.T) {
	q, err := New(Config{Seats: 1, QueueWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var wg sync.WaitGroup
	waitClosed(t, hold(t, q, &wg, "a", release), "a seated")
	ran := false
	if q.serve(context.Background(), "b", get, func() { ran = true }) || ran {
		t.Fatal("b ran while the only seat was held past its wait")
	}
	close(release)
	wg.Wait()
	if !q.serve(context.Background(), "b", get, func() { ran = true }) || !ran {
		t.Fatal("b refused with the seat free")
	}
}

func TestNewRefusesNoSeats(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("a queue without seats")
	}
}
