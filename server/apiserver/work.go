package apiserver

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// workStopTimeout bounds how long a stopping server waits for its
// in-process work to end before it stops accepting requests. The work
// ends within milliseconds; past the bound the shutdown goes on, and what
// still runs ends as the server's requests do.
const workStopTimeout = 5 * time.Second

// inProcessWork is kplane's work inside the server (the plane manager, the
// CRDs, the Leases and the work they hold: plane lifecycle, controllers,
// simulation, Fleets, manifests; the metrics): started by the post-start
// hooks, and stopped by a pre-shutdown hook, while the server still
// serves its requests.
//
// The post-start hooks' context ends only once the server has stopped
// accepting requests, at the moment its listener closes. Work that
// stopped then raced the shutdown: the last writes of its end (the
// release of this server's Leases) were refused with 503 "apiserver is
// shutting down", and the in-process client's requests still open as the
// listener closed kept its HTTP/2 connection from being closed as idle
// (hangUpLoopbackOnClose); when they ended before the server's GOAWAY
// reached the client, the client no longer closed the connection and the
// server waited x/net/http2's GOAWAY timeout (1 s) for it. Stopped here
// first, the work's last writes are served, and the in-process connection
// is idle when the listener closes.
type inProcessWork struct {
	// ctx ends when the work is stopped.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	stopped bool
	running sync.WaitGroup
}

func newInProcessWork() *inProcessWork {
	ctx, cancel := context.WithCancel(context.Background())
	return &inProcessWork{ctx: ctx, cancel: cancel}
}

// Do runs f with a context that ends when parent does or the work stops,
// and a stop waits for f to return. Once the work is stopped, f runs with
// a context already done.
func (w *inProcessWork) Do(parent context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	defer context.AfterFunc(w.ctx, cancel)()
	if w.track() {
		defer w.running.Done()
	} else {
		cancel()
	}
	return f(ctx)
}

// Go runs f as Do does, in a goroutine of its own.
func (w *inProcessWork) Go(parent context.Context, f func(context.Context)) {
	ctx, cancel := context.WithCancel(parent)
	unhook := context.AfterFunc(w.ctx, cancel)
	tracked := w.track()
	if !tracked {
		cancel()
	}
	go func() {
		defer cancel()
		defer unhook()
		if tracked {
			defer w.running.Done()
		}
		f(ctx)
	}()
}

// track counts one more running function, unless the work is stopped (a
// WaitGroup may not grow once waited for).
func (w *inProcessWork) track() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	w.running.Add(1)
	return true
}

// Stop ends the work and waits, up to timeout, for it to return.
func (w *inProcessWork) Stop(timeout time.Duration) {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	w.cancel()
	done := make(chan struct{})
	go func() {
		w.running.Wait()
		close(done)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		logrus.WithField("timeout", timeout).Warn("the in-process work has not ended; stopping the server all the same")
	}
}
