package fairness

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
	"k8s.io/utils/clock"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/auth"
)

// PriorityLevel names the one priority level of plane requests in
// upstream's apiserver_flowcontrol_* metrics.
const PriorityLevel = "kplane-planes"

// Config shapes the queues. Zero values take the defaults below.
type Config struct {
	// Seats are the requests of all planes executing at once.
	Seats int
	// PlaneSeats are the most of them one plane holds at once while no
	// other plane is active (default half of Seats, at least 1).
	PlaneSeats int
	// CPUs are shared among the active planes: with others active, a plane
	// executes at most max(1, CPUs/active planes) requests (0: off, each
	// plane holds up to PlaneSeats whoever else is active).
	CPUs int
	// ActiveWindow keeps a plane active after its last request ended
	// (default 1 s), so that one making requests one after another counts
	// between them.
	ActiveWindow time.Duration
	// Clock is the time of the active windows (default the real clock).
	Clock clock.Clock
	// Queues, HandSize and QueueLength are upstream's shuffle-sharding
	// parameters: a plane's requests go to the shortest of HandSize of
	// Queues queues picked by its hash; past QueueLength waiting requests
	// a queue refuses (429).
	Queues      int
	HandSize    int
	QueueLength int
	// QueueWait bounds a request's wait for a seat (then 429).
	QueueWait time.Duration
	// LongRunning tells watches and other long-running requests, which
	// hold no seat (as upstream's max-in-flight filter).
	LongRunning func(*http.Request, *request.RequestInfo) bool
}

// Defaults of upstream's workload-low priority level, but for the seats.
const (
	DefaultQueues      = 128
	DefaultHandSize    = 6
	DefaultQueueLength = 50
	DefaultQueueWait   = 15 * time.Second
	// DefaultActiveWindow spans the pauses of a client making requests
	// one after another.
	DefaultActiveWindow = time.Second
)

// Queue is the fair queue of every plane's requests.
type Queue struct {
	config Config
	set    fq.QueueSet
	// perPlane caps the seats of each plane.
	perPlane *planeSeats
	// root caps the root plane's, which does not share the CPUs with the
	// others: it is the server's administration (Planes, Fleets), and a
	// tenant's activity must not serialize every plane's creation.
	root *planeSeats
}

// New returns the queue; config.Seats must be positive.
func New(config Config) (*Queue, error) {
	if config.Seats <= 0 {
		return nil, fmt.Errorf("fair queuing needs at least one seat, not %d", config.Seats)
	}
	config.Queues = orDefault(config.Queues, DefaultQueues)
	config.HandSize = min(orDefault(config.HandSize, DefaultHandSize), config.Queues)
	config.QueueLength = orDefault(config.QueueLength, DefaultQueueLength)
	config.PlaneSeats = min(orDefault(config.PlaneSeats, max(config.Seats/2, 1)), config.Seats)
	if config.QueueWait <= 0 {
		config.QueueWait = DefaultQueueWait
	}
	if config.ActiveWindow <= 0 {
		config.ActiveWindow = DefaultActiveWindow
	}
	if config.Clock == nil {
		config.Clock = clock.RealClock{}
	}
	labels := []string{PriorityLevel}
	completer, err := queueset.NewQueueSetFactory(eventclock.Real{}).BeginConstruction(
		fq.QueuingConfig{Name: PriorityLevel, DesiredNumQueues: config.Queues, QueueLengthLimit: config.QueueLength, HandSize: config.HandSize},
		metrics.RatioedGaugeVecPhasedElementPair(metrics.PriorityLevelConcurrencyGaugeVec, 1, 1, labels),
		metrics.PriorityLevelExecutionSeatsGaugeVec.NewForLabelValuesSafe(0, 1, labels),
		fq.NewNamedIntegrator(eventclock.Real{}, PriorityLevel))
	if err != nil {
		return nil, fmt.Errorf("fair queues: %w", err)
	}
	set := completer.Complete(fq.DispatchingConfig{ConcurrencyLimit: config.Seats, ConcurrencyDenominator: config.Seats})
	return &Queue{config: config, set: set,
		perPlane: newPlaneSeats(config.PlaneSeats, config.CPUs, config.ActiveWindow, config.Clock),
		root:     newPlaneSeats(config.PlaneSeats, config.PlaneSeats, config.ActiveWindow, config.Clock)}, nil
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// Filter holds every request to a plane until the fair queue gives it a
// seat; a request its plane's queue cannot take, or that waited
// QueueWait, answers 429 with Retry-After as upstream's APF does. The
// server's own in-process clients and long-running requests hold no seat.
func (q *Queue) Filter(next http.Handler, serializer runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		plane, ok := auth.TenantPlane(ctx)
		info, _ := request.RequestInfoFrom(ctx)
		if !ok || info == nil ||
			(q.config.LongRunning != nil && q.config.LongRunning(req, info)) {
			next.ServeHTTP(w, req)
			return
		}
		if !q.serve(ctx, plane, info, func(ctx context.Context) { next.ServeHTTP(w, req.WithContext(ctx)) }) {
			err := apierrors.NewTooManyRequests(fmt.Sprintf(
				"plane %s has too many requests waiting for the server; retry (its requests queue fairly with other planes')", plane), 1)
			responsewriters.ErrorNegotiated(err, serializer, schema.GroupVersion{Version: "v1"}, w, req)
		}
	})
}

// serve runs execute, with a context that holds the request's seat, once
// plane's request gets one, and reports whether it ran.
func (q *Queue) serve(ctx context.Context, plane string, info *request.RequestInfo, execute func(context.Context)) bool {
	waitCtx, cancel := context.WithTimeout(ctx, q.config.QueueWait)
	defer cancel()
	seats := q.perPlane
	if plane == planes.Root {
		seats = q.root
	}
	seat, ok := seats.acquire(waitCtx, plane)
	if !ok {
		return false
	}
	defer seat.release()
	// One seat per request: upstream's estimator sizes a LIST by the
	// resource's object count across the whole server, which here is
	// every plane's, not the listing plane's.
	work := &fcrequest.WorkEstimate{InitialSeats: 1}
	r, _ := q.set.StartRequest(waitCtx, work, flowHash(plane), plane, PriorityLevel, plane, info.Verb, nil)
	if r == nil {
		return false
	}
	ran := false
	r.Finish(func() {
		ran = true
		execute(planes.WithSeat(ctx, seat))
	})
	return ran
}

// flowHash spreads planes over the queues (shuffle sharding's entropy).
func flowHash(plane string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(plane))
	return h.Sum64()
}
