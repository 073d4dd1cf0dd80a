package kplanetest

import (
	"context"
	"time"
)

// DefaultPrewarm is how many planes an Env keeps ready ahead of NewPlane
// unless Options.Prewarm says otherwise.
const DefaultPrewarm = 8

// pool keeps planes with the Env's CRDs created and ready before a test
// asks for one, so that NewPlane only takes one: creating a plane costs
// the server its bootstrap writes, which a test would otherwise wait for.
// Every plane is handed out once and deleted after its test, as any other.
type pool struct {
	ready  chan *PlaneHandle
	cancel context.CancelFunc
	done   chan struct{}
}

// startPool fills a pool of size planes in the background.
func (e *Env) startPool(size int) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool{ready: make(chan *PlaneHandle, size), cancel: cancel, done: make(chan struct{})}
	e.pool = p
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			h, err := e.createPlane(ctx, planeSettings{labels: map[string]string{}})
			if err != nil {
				// The server is going away or refuses planes: NewPlane
				// creates its own and reports why.
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			select {
			case p.ready <- h:
			case <-ctx.Done():
				// Stop deletes it with the run's other planes.
				return
			}
		}
	}()
}

// take returns a ready plane, or nil when none is ready right now.
func (p *pool) take() *PlaneHandle {
	if p == nil {
		return nil
	}
	select {
	case h := <-p.ready:
		return h
	default:
		return nil
	}
}

// stop ends the filling; the planes still in the pool belong to the run
// and Stop deletes them.
func (p *pool) stop() {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
}
