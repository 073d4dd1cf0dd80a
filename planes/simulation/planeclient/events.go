package planeclient

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"

	"kplane.dev/kplane/planes"
)

// Events writes the Events the workload controllers create in the
// background, planes in turn.
//
// Each upstream controller's recorder hands its Events to one goroutine
// that writes them one at a time, behind a queue of 1,000 that drops
// silently once full. With every plane's Events through the same
// recorders, a burst in some planes left no room for the others': with
// 1,000 planes rolling out a Deployment each, 1,183 of the 7,000 Events
// were written, and every plane after the first ~400 had lost its
// Scheduled and SuccessfulCreate Events. Events answers an Event's create
// at once, as the API would (the Event as sent), and writes it later: one
// queue of planes, each plane's Events in the order they came, at most
// maxPendingPerPlane waiting per plane. A plane with more loses its own
// newest Events, never another plane's.
type Events struct {
	planes  workqueue.TypedInterface[string]
	running atomic.Bool

	mu      sync.Mutex
	pending map[string][]deferredEvent
	total   int
	dropped atomic.Int64
}

// deferredEvent is one Event create, unfolded, waiting to be sent.
type deferredEvent struct {
	req  *http.Request
	body []byte
	next http.RoundTripper
}

const (
	// maxPendingPerPlane bounds the Events one plane has waiting: a
	// Deployment's rollout in a plane makes about ten.
	maxPendingPerPlane = 256
	// maxPending bounds the Events waiting in all: about 1 KiB each.
	maxPending = 50_000
	// eventsPerTurn is how many Events of a plane a worker writes before
	// the next plane's turn.
	eventsPerTurn = 8
	// eventWriteTimeout bounds one write.
	eventWriteTimeout = 30 * time.Second
)

// NewEvents returns a writer that takes Events once Run runs; until then
// (and after it ended) Event creates are sent at once.
func NewEvents() *Events {
	return &Events{
		planes:  workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "kplane_simulation_events"}),
		pending: map[string][]deferredEvent{},
	}
}

// Run writes the waiting Events with workers goroutines until ctx is done;
// Events still waiting then are dropped.
func (e *Events) Run(ctx context.Context, workers int) {
	e.running.Store(true)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for e.writeTurn(ctx) {
			}
		})
	}
	<-ctx.Done()
	e.running.Store(false)
	e.planes.ShutDown()
	wg.Wait()
	e.mu.Lock()
	e.pending, e.total = map[string][]deferredEvent{}, 0
	e.mu.Unlock()
}

// Dropped is the number of Events dropped because their plane, or all
// planes together, had too many waiting.
func (e *Events) Dropped() int64 { return e.dropped.Load() }

// take answers req, an Event create for plane (body: its unfolded JSON,
// original: the body as the controller sent it), and queues it; false if
// the writer is not running.
func (e *Events) take(plane string, req *http.Request, body, original []byte, next http.RoundTripper) (*http.Response, bool) {
	if !e.running.Load() {
		return nil, false
	}
	e.mu.Lock()
	if len(e.pending[plane]) >= maxPendingPerPlane || e.total >= maxPending {
		e.mu.Unlock()
		if n := e.dropped.Add(1); n == 1 || n%1000 == 0 {
			logrus.Debugf("simulation: %d Events dropped (plane %s has %d waiting)", n, plane, maxPendingPerPlane)
		}
	} else {
		e.pending[plane] = append(e.pending[plane], deferredEvent{req: req, body: body, next: next})
		e.total++
		e.mu.Unlock()
		e.planes.Add(plane)
	}
	return jsonResponse(req, http.StatusCreated, original), true
}

// writeTurn writes up to eventsPerTurn Events of the next plane in line;
// false once the writer stops.
func (e *Events) writeTurn(ctx context.Context) bool {
	plane, shutdown := e.planes.Get()
	if shutdown {
		return false
	}
	defer e.planes.Done(plane)
	e.mu.Lock()
	batch := e.pending[plane]
	if len(batch) > eventsPerTurn {
		batch = batch[:eventsPerTurn]
	}
	rest := e.pending[plane][len(batch):]
	if len(rest) == 0 {
		delete(e.pending, plane)
	} else {
		e.pending[plane] = rest
		// Added while being processed: the queue hands the plane out again
		// after Done, behind the planes already waiting.
		e.planes.Add(plane)
	}
	e.total -= len(batch)
	e.mu.Unlock()
	for _, ev := range batch {
		e.write(ctx, plane, ev)
	}
	return true
}

func (e *Events) write(ctx context.Context, plane string, ev deferredEvent) {
	ctx, cancel := context.WithTimeout(planes.WithPlane(ctx, plane), eventWriteTimeout)
	defer cancel()
	out := ev.req.Clone(ctx)
	setBody(out, ev.body)
	resp, err := ev.next.RoundTrip(out)
	if err != nil {
		logrus.WithError(err).Debugf("simulation: writing an Event of plane %s", plane)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		logrus.Debugf("simulation: an Event of plane %s answered %d", plane, resp.StatusCode)
	}
}

// isEventCreate reports whether req creates an Event (core or
// events.k8s.io): a POST to a namespace's events collection.
func isEventCreate(req *http.Request) bool {
	if req.Method != http.MethodPost {
		return false
	}
	// /api/v1/namespaces/<ns>/events or
	// /apis/events.k8s.io/v1/namespaces/<ns>/events
	segments := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(segments) == 5 && segments[0] == "api" && segments[1] == "v1":
	case len(segments) == 6 && segments[0] == "apis" && segments[1] == "events.k8s.io":
		segments = segments[1:]
	default:
		return false
	}
	return segments[2] == "namespaces" && segments[4] == "events"
}
