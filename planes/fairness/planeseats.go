package fairness

import (
	"context"
	"sync"
)

// planeSeats bounds the seats one plane holds at once. Fair queuing only
// orders who gets the next free seat; it never takes one back. A plane
// whose requests block while seated (an admission webhook that hangs for
// its timeout, a slow datastore) would otherwise hold every seat, and
// every other plane would wait for one of them to end. Capped, a plane's
// further requests wait outside the queue set, and the other seats stay
// free for other planes.
type planeSeats struct {
	limit int

	mu sync.Mutex
	// held has an entry only while a plane has requests seated or waiting
	// for its cap: an idle plane costs nothing.
	held map[string]*planeSlot
}

type planeSlot struct {
	// seats has room for limit requests.
	seats chan struct{}
	// users are the requests seated or waiting.
	users int
}

func newPlaneSeats(limit int) *planeSeats {
	return &planeSeats{limit: limit, held: map[string]*planeSlot{}}
}

// acquire waits until plane holds fewer than the limit, or ctx ends
// (false); release must then be called once.
func (p *planeSeats) acquire(ctx context.Context, plane string) (release func(), ok bool) {
	p.mu.Lock()
	slot := p.held[plane]
	if slot == nil {
		slot = &planeSlot{seats: make(chan struct{}, p.limit)}
		p.held[plane] = slot
	}
	slot.users++
	p.mu.Unlock()
	select {
	case slot.seats <- struct{}{}:
		return func() {
			<-slot.seats
			p.leave(plane, slot)
		}, true
	case <-ctx.Done():
		p.leave(plane, slot)
		return nil, false
	}
}

func (p *planeSeats) leave(plane string, slot *planeSlot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slot.users--; slot.users == 0 {
		delete(p.held, plane)
	}
}

// planes returns how many planes hold state.
func (p *planeSeats) planes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}
