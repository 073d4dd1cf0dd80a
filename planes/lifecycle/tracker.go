package lifecycle

import (
	"context"
	"sync"
)

// tracker holds a cancel function for every request in flight per plane,
// so that deleting a plane can end its watches.
type tracker struct {
	mu   sync.Mutex
	next uint64
	byID map[string]map[uint64]context.CancelFunc
}

func newTracker() *tracker {
	return &tracker{byID: map[string]map[uint64]context.CancelFunc{}}
}

// track returns a context that is cancelled when plane is deleted, and the
// function to call when the request ends.
func (t *tracker) track(ctx context.Context, plane string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	t.mu.Lock()
	t.next++
	id := t.next
	if t.byID[plane] == nil {
		t.byID[plane] = map[uint64]context.CancelFunc{}
	}
	t.byID[plane][id] = cancel
	t.mu.Unlock()
	return ctx, func() {
		cancel()
		t.mu.Lock()
		delete(t.byID[plane], id)
		if len(t.byID[plane]) == 0 {
			delete(t.byID, plane)
		}
		t.mu.Unlock()
	}
}

// cancel ends every request in flight to plane.
func (t *tracker) cancel(plane string) int {
	t.mu.Lock()
	cancels := t.byID[plane]
	delete(t.byID, plane)
	t.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	return len(cancels)
}
