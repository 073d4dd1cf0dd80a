package fairness

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/endpoints/request"
	clocktesting "k8s.io/utils/clock/testing"

	"kplane.dev/kplane/planes"
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
		q.serve(context.Background(), plane, get, func(context.Context) {
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
	clk := clocktesting.NewFakeClock(time.Now())
	q, err := New(Config{Seats: 2, Clock: clk})
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
		if !q.serve(context.Background(), "b", get, func(context.Context) {}) {
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
	clk.Step(DefaultActiveWindow)
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
	if q.serve(context.Background(), "b", get, func(context.Context) { ran = true }) || ran {
		t.Fatal("b ran while the only seat was held past its wait")
	}
	close(release)
	wg.Wait()
	if !q.serve(context.Background(), "b", get, func(context.Context) { ran = true }) || !ran {
		t.Fatal("b refused with the seat free")
	}
}

func TestNewRefusesNoSeats(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("a queue without seats")
	}
}

// TestActivePlanesShareTheCPUs: a plane alone executes up to half the
// seats; once another plane is active, each executes at most
// max(1, CPUs/active), and the limit grows back once the other plane's
// window has passed.
func TestActivePlanesShareTheCPUs(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	q, err := New(Config{Seats: 64, CPUs: 2, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	releaseA := make(chan struct{})
	for i := range 3 {
		waitClosed(t, hold(t, q, &wg, "a", releaseA), fmt.Sprintf("a's request %d seated while a is alone", i))
	}
	releaseB := make(chan struct{})
	waitClosed(t, hold(t, q, &wg, "b", releaseB), "b seated beside a")
	releaseA2 := make(chan struct{})
	fourth := hold(t, q, &wg, "a", releaseA2)
	notYet(t, q, "a", fourth, "a's fourth request seated with 3 running and b active (limit 1)")
	close(releaseA)
	waitClosed(t, fourth, "a's fourth request seated once its others ended")
	fifth := hold(t, q, &wg, "a", releaseA2)
	notYet(t, q, "a", fifth, "a's fifth request seated with one running and b active")
	close(releaseB)
	resting(t, q, "b")
	notYet(t, q, "a", fifth, "a's fifth request seated within b's window")
	clk.Step(DefaultActiveWindow)
	waitClosed(t, fifth, "a's fifth request seated once b's window passed")
	close(releaseA2)
	wg.Wait()
}

// TestYieldLetsAWebhookCallThePlane: a request at its plane's limit that
// waits on a webhook gives its seat up, so the webhook's own request to
// the plane runs, and takes a seat again after.
func TestYieldLetsAWebhookCallThePlane(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	q, err := New(Config{Seats: 64, CPUs: 2, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	releaseB := make(chan struct{})
	waitClosed(t, hold(t, q, &wg, "b", releaseB), "b seated")
	other := make(chan struct{})
	waitClosed(t, hold(t, q, &wg, "c", other), "c seated")
	// Three planes active on 2 CPUs: each executes one request at a time.
	calledBack := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.serve(context.Background(), "a", get, func(ctx context.Context) {
			back := planes.YieldSeat(ctx)
			if !q.serve(context.Background(), "a", get, func(context.Context) {}) {
				t.Error("the webhook's call to a refused")
			}
			close(calledBack)
			back()
		})
	}()
	waitClosed(t, calledBack, "the webhook's call to its own plane served")
	waitClosed(t, done, "a's request done after the webhook")
	close(releaseB)
	close(other)
	wg.Wait()
	if n := q.perPlane.held["a"]; n != nil && n.running != 0 {
		t.Fatalf("a still runs %d requests", n.running)
	}
}

// notYet waits until one of plane's requests waits for its limit, then
// fails if ch (that request's start) is closed: it must not have been
// granted.
func notYet(t *testing.T, q *Queue, plane string, ch <-chan struct{}, what string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, guard, true, func(context.Context) (bool, error) {
		q.perPlane.mu.Lock()
		defer q.perPlane.mu.Unlock()
		slot := q.perPlane.held[plane]
		return slot != nil && len(slot.waiting) > 0, nil
	})
	select {
	case <-ch:
		t.Fatal(what)
	default:
	}
	if err != nil {
		t.Fatalf("no request of %s waits: %v", plane, err)
	}
}

// resting waits until plane has nothing running or waiting and its window
// has begun.
func resting(t *testing.T, q *Queue, plane string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, guard, true, func(context.Context) (bool, error) {
		q.perPlane.mu.Lock()
		defer q.perPlane.mu.Unlock()
		slot := q.perPlane.held[plane]
		return slot != nil && slot.running == 0 && !slot.lastEnd.IsZero(), nil
	})
	if err != nil {
		t.Fatalf("%s never rested: %v", plane, err)
	}
}

// TestRootSharesNoCPUs: the root plane (the server's administration) is
// not held to a share of the CPUs while tenants are active, and its
// requests do not shrink the tenants' share.
func TestRootSharesNoCPUs(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	q, err := New(Config{Seats: 64, CPUs: 4, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	release := make(chan struct{})
	waitClosed(t, hold(t, q, &wg, "a", release), "a seated")
	waitClosed(t, hold(t, q, &wg, "b", release), "b seated")
	for i := range 3 {
		waitClosed(t, hold(t, q, &wg, planes.Root, release), fmt.Sprintf("root's request %d seated beside two active planes", i))
	}
	waitClosed(t, hold(t, q, &wg, "a", release), "a's second request seated: two active planes on 4 CPUs, root not counted")
	close(release)
	wg.Wait()
}
