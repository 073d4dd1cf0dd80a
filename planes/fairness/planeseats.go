package fairness

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// planeSeats bounds the requests one plane executes at once.
//
// Fair queuing only orders who gets the next free seat; it never takes one
// back, and a seat says nothing of the CPU its request uses. A plane whose
// requests block while seated (an admission webhook that hangs for its
// timeout, a slow datastore) would otherwise hold every seat; and a plane
// flooding a small machine with requests that are all seated at once
// leaves another plane's request one runnable goroutine among dozens, so
// its latency grows with the flood although it never queues.
//
// So a plane alone may hold up to idle seats (the server's seats are there
// to be used), but while other planes are active the CPUs are shared among
// them: each plane executes at most max(1, cpus/active) requests. A plane
// is active while it has requests executing or waiting here, and for
// window after its last one ended, so that a plane making one request
// after another stays active between them. Limits take effect as requests
// end: nothing running is preempted.
type planeSeats struct {
	idle   int
	cpus   int
	window time.Duration
	clock  clock.Clock

	mu sync.Mutex
	// held has an entry for each active plane: an idle plane costs nothing
	// once its window has passed.
	held map[string]*planeSlot
	// resting are the planes whose requests all ended, oldest first: the
	// ones whose window passed are dropped from held.
	resting []restingPlane
	// blocked are the planes with requests waiting for their limit, to be
	// woken when other planes go idle and the limits grow.
	blocked map[string]*planeSlot
}

type planeSlot struct {
	running int
	// waiting are the requests waiting for the plane's limit, first come
	// first served.
	waiting []*seatWaiter
	// lastEnd is when the plane's last request ended, zero while any runs
	// or waits.
	lastEnd time.Time
}

type restingPlane struct {
	plane string
	since time.Time
}

type seatWaiter struct {
	granted chan struct{}
	// done is set under the lock once the waiter is granted or gave up.
	done bool
}

func newPlaneSeats(idle, cpus int, window time.Duration, clk clock.Clock) *planeSeats {
	return &planeSeats{idle: max(idle, 1), cpus: cpus, window: window, clock: clk,
		held: map[string]*planeSlot{}, blocked: map[string]*planeSlot{}}
}

// acquire waits until plane executes fewer requests than its limit, or ctx
// ends (false); the seat must then be released once.
func (p *planeSeats) acquire(ctx context.Context, plane string) (*seat, bool) {
	if !p.take(ctx, plane) {
		return nil, false
	}
	return &seat{seats: p, plane: plane, held: true}, true
}

// take waits for a seat of plane, or for ctx to end (false).
func (p *planeSeats) take(ctx context.Context, plane string) bool {
	p.mu.Lock()
	p.expireLocked()
	slot := p.slotLocked(plane)
	if len(slot.waiting) == 0 && slot.running < p.limitLocked() {
		slot.running++
		p.mu.Unlock()
		return true
	}
	w := &seatWaiter{granted: make(chan struct{})}
	slot.waiting = append(slot.waiting, w)
	p.blocked[plane] = slot
	p.mu.Unlock()
	if p.wait(ctx, w) {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.done {
		// Granted as ctx ended: hand the seat on.
		p.releaseLocked(plane)
		return false
	}
	w.done = true
	for i, other := range slot.waiting {
		if other == w {
			slot.waiting = append(slot.waiting[:i], slot.waiting[i+1:]...)
			break
		}
	}
	p.settleLocked(plane, slot)
	return false
}

// wait waits for w's grant or ctx's end. Limits grow when other planes'
// windows pass, which nothing else may notice while this plane's running
// requests run long: each window, the expired planes are dropped.
func (p *planeSeats) wait(ctx context.Context, w *seatWaiter) bool {
	for {
		select {
		case <-w.granted:
			return true
		case <-ctx.Done():
			return false
		case <-p.clock.After(p.window):
			p.mu.Lock()
			p.expireLocked()
			p.mu.Unlock()
		}
	}
}

func (p *planeSeats) release(plane string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(plane)
}

func (p *planeSeats) releaseLocked(plane string) {
	slot := p.held[plane]
	if slot == nil {
		return
	}
	slot.running--
	p.expireLocked()
	p.dispatchLocked(plane, slot)
	p.settleLocked(plane, slot)
}

// slotLocked returns plane's slot, making the plane active.
func (p *planeSeats) slotLocked(plane string) *planeSlot {
	slot := p.held[plane]
	if slot == nil {
		slot = &planeSlot{}
		p.held[plane] = slot
	}
	slot.lastEnd = time.Time{}
	return slot
}

// limitLocked is what each plane may execute with the active planes now.
func (p *planeSeats) limitLocked() int {
	if p.cpus <= 0 || len(p.held) <= 1 {
		return p.idle
	}
	return min(p.idle, max(1, p.cpus/len(p.held)))
}

// dispatchLocked grants plane's waiting requests the seats its limit has.
func (p *planeSeats) dispatchLocked(plane string, slot *planeSlot) {
	limit := p.limitLocked()
	for slot.running < limit && len(slot.waiting) > 0 {
		w := slot.waiting[0]
		slot.waiting = slot.waiting[1:]
		w.done = true
		slot.running++
		close(w.granted)
	}
	if len(slot.waiting) == 0 {
		delete(p.blocked, plane)
	}
}

// settleLocked starts plane's window once nothing of it runs or waits.
func (p *planeSeats) settleLocked(plane string, slot *planeSlot) {
	if slot.running > 0 || len(slot.waiting) > 0 {
		return
	}
	now := p.clock.Now()
	slot.lastEnd = now
	p.resting = append(p.resting, restingPlane{plane: plane, since: now})
	p.expireLocked()
}

// expireLocked drops the planes whose window passed; fewer active planes
// raise the others' limits, so the blocked ones are dispatched again.
func (p *planeSeats) expireLocked() {
	now, dropped := p.clock.Now(), false
	for len(p.resting) > 0 && now.Sub(p.resting[0].since) >= p.window {
		r := p.resting[0]
		p.resting = p.resting[1:]
		// The plane may have been active again since it rested.
		if slot := p.held[r.plane]; slot != nil && slot.lastEnd.Equal(r.since) {
			delete(p.held, r.plane)
			dropped = true
		}
	}
	if !dropped {
		return
	}
	for plane, slot := range p.blocked {
		p.dispatchLocked(plane, slot)
	}
}

// seat is one request's place among its plane's executing requests.
type seat struct {
	seats *planeSeats
	plane string

	mu   sync.Mutex
	held bool
}

// release gives the seat up for good.
func (s *seat) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.held = false
		s.seats.release(s.plane)
	}
}

// Yield implements planes.Seat: a request waiting on the datastore or a
// webhook uses no CPU, and a webhook may call the plane back, which with
// the plane at its limit would wait for the very request that waits on it.
func (s *seat) Yield(ctx context.Context) (back func()) {
	s.mu.Lock()
	if !s.held {
		s.mu.Unlock()
		return func() {}
	}
	s.held = false
	s.seats.release(s.plane)
	s.mu.Unlock()
	return func() {
		if s.seats.take(ctx, s.plane) {
			s.mu.Lock()
			s.held = true
			s.mu.Unlock()
		}
	}
}

// planes returns how many planes hold state (active ones, and the rested
// whose window has not passed).
func (p *planeSeats) planes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.expireLocked()
	return len(p.held)
}
