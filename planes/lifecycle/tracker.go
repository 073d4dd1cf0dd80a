package lifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// tracker counts the requests in flight per plane. Deleting a plane closes
// it: no request enters any more, watches are ended, and the deletion waits
// for the requests already inside before it wipes the plane's storage, so
// that nothing a request writes outlives the wipe.
type tracker struct {
	mu     sync.Mutex
	next   uint64
	planes map[string]*inflight
}

type inflight struct {
	count  int
	closed bool
	// held, while a reset runs, makes new requests wait until it is closed;
	// idle is closed once no request is in flight.
	held    chan struct{}
	idle    chan struct{}
	watches map[uint64]context.CancelFunc
	// drained is closed once the plane is closed and count is zero.
	drained chan struct{}
}

func newTracker() *tracker {
	return &tracker{planes: map[string]*inflight{}}
}

func (t *tracker) plane(name string) *inflight {
	p := t.planes[name]
	if p == nil {
		p = &inflight{watches: map[uint64]context.CancelFunc{}, drained: make(chan struct{})}
		t.planes[name] = p
	}
	return p
}

// entry is why a request was not admitted.
type entry int

const (
	admitted entry = iota
	// closedToRequests: the plane is being deleted (or the request's
	// context ended while it waited).
	closedToRequests
	// heldForReset: the plane is held and the request asked not to wait.
	heldForReset
)

// enter admits a request to plane unless the plane is closed; while the
// plane is held (reset) it waits for it to be released, or with noWait is
// not admitted. A watch gets a context that ends when the plane is closed
// or held. done must be called when the request ends.
func (t *tracker) enter(ctx context.Context, plane string, watch, noWait bool) (_ context.Context, done func(), e entry) {
	for {
		t.mu.Lock()
		p := t.plane(plane)
		held := p.held
		if held == nil {
			break
		}
		t.mu.Unlock()
		if noWait {
			return ctx, func() {}, heldForReset
		}
		select {
		case <-held:
		case <-ctx.Done():
			return ctx, func() {}, closedToRequests
		}
	}
	defer t.mu.Unlock()
	p := t.plane(plane)
	if p.closed {
		return ctx, func() {}, closedToRequests
	}
	p.count++
	var id uint64
	cancel := context.CancelFunc(func() {})
	if watch {
		ctx, cancel = context.WithCancel(ctx)
		t.next++
		id = t.next
		p.watches[id] = cancel
	}
	return ctx, func() {
		cancel()
		t.mu.Lock()
		defer t.mu.Unlock()
		if watch {
			delete(p.watches, id)
		}
		p.count--
		if p.count == 0 {
			if p.idle != nil {
				close(p.idle)
				p.idle = nil
			}
			if p.closed {
				close(p.drained)
			} else if t.planes[plane] == p && p.held == nil {
				delete(t.planes, plane)
			}
		}
	}, admitted
}

// hold makes new requests to plane wait, ends its watches, and returns a
// channel closed once the requests inside have finished and the function
// that lets requests in again. It reports false when the plane is held
// already.
func (t *tracker) hold(plane string) (<-chan struct{}, func(), bool) {
	t.mu.Lock()
	p := t.plane(plane)
	if p.held != nil {
		t.mu.Unlock()
		return nil, nil, false
	}
	p.held = make(chan struct{})
	idle := make(chan struct{})
	if p.count == 0 {
		close(idle)
	} else {
		p.idle = idle
	}
	watches := p.watches
	p.watches = map[uint64]context.CancelFunc{}
	t.mu.Unlock()
	for _, cancel := range watches {
		cancel()
	}
	var once sync.Once
	return idle, func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			close(p.held)
			p.held = nil
			if p.count == 0 && !p.closed && t.planes[plane] == p {
				delete(t.planes, plane)
			}
		})
	}, true
}

// close refuses new requests to plane, ends its watches and returns how
// many it ended and a channel closed once no request is in flight.
func (t *tracker) close(plane string) (int, <-chan struct{}) {
	t.mu.Lock()
	p := t.plane(plane)
	if !p.closed {
		p.closed = true
		if p.count == 0 {
			close(p.drained)
		}
	}
	watches := p.watches
	p.watches = map[uint64]context.CancelFunc{}
	t.mu.Unlock()
	for _, cancel := range watches {
		cancel()
	}
	return len(watches), p.drained
}

// reopen admits requests to plane again (it was deleted and may be
// created anew). Requests of the old plane still in flight keep their
// accounting and are not counted against the new one.
func (t *tracker) reopen(plane string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.planes[plane]; p != nil && p.closed {
		delete(t.planes, plane)
	}
}

// watches returns the number of watches open in plane.
func (t *tracker) watches(plane string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.planes[plane]; p != nil {
		return len(p.watches)
	}
	return 0
}

// awaitDrained waits until drained is closed (the plane's requests in
// flight have ended), at most drainTimeout: past it, it warns that
// requests are still in flight and that the caller goes on anyway. It
// reports false when ctx ended first.
func awaitDrained(ctx context.Context, plane string, drained <-chan struct{}, anyway string) bool {
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		logrus.WithField("plane", plane).Warnf("requests still in flight after %s; %s", drainTimeout, anyway)
	case <-ctx.Done():
		return false
	}
	return true
}
