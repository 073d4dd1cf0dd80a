package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"kplane.dev/kplane/planes"
)

// Others is the plane label value that sums every plane outside the top N.
const Others = "_others"

// Config configures the plane metrics.
type Config struct {
	// TopPlanes is how many planes get a series of their own.
	TopPlanes int
	// Window is the period planes are ranked over.
	Window time.Duration
}

// Planes is what the metrics read of the planes that exist.
type Planes interface {
	// Phases returns the number of planes per phase.
	Phases() map[string]int
	// Exists reports whether a plane exists; counters of planes that do
	// not are dropped when the window turns.
	Exists(plane string) bool
}

// Metrics counts requests per plane and exposes the request metrics.
type Metrics struct {
	metrics.BaseStableCollector

	config Config
	total  atomic.Uint64
	// counters maps a plane id to its *counter. sync.Map: after a plane's
	// first request, counting takes no lock.
	counters sync.Map
	window   atomic.Pointer[ranking]

	totalDesc, planeDesc *metrics.Desc
}

// PhaseCollector exposes kplane_planes: the planes by phase.
type PhaseCollector struct {
	metrics.BaseStableCollector
	planes Planes
	desc   *metrics.Desc
}

type counter struct {
	n atomic.Uint64
	// seen is n at the last turn of the window; only turn touches it.
	seen uint64
}

// ranking is what one complete window saw.
type ranking struct {
	top    []planeCount
	others uint64
}

type planeCount struct {
	plane string
	n     uint64
}

// New returns the request metrics; Register exposes them, Run turns the
// window. They exist before the planes do: the plane manager forgets a
// deleted plane's counter.
func New(config Config) (*Metrics, error) {
	if config.TopPlanes < 1 {
		return nil, fmt.Errorf("--metrics-top-planes %d: want at least 1", config.TopPlanes)
	}
	if config.Window < time.Second {
		return nil, fmt.Errorf("--metrics-window %s: want at least 1s", config.Window)
	}
	m := &Metrics{
		config: config,
		totalDesc: metrics.NewDesc("kplane_requests_total", "Requests served to planes (every plane, root included).",
			nil, nil, metrics.ALPHA, ""),
		planeDesc: metrics.NewDesc("kplane_plane_requests",
			fmt.Sprintf("Requests in the last complete window (%s) for the %d busiest planes of that window; plane=%q sums all other planes.",
				config.Window, config.TopPlanes, Others),
			[]string{"plane"}, nil, metrics.ALPHA, ""),
	}
	m.window.Store(&ranking{})
	return m, nil
}

// NewPhaseCollector returns the collector of the planes by phase.
func NewPhaseCollector(planes Planes) *PhaseCollector {
	return &PhaseCollector{planes: planes,
		desc: metrics.NewDesc("kplane_planes", "Number of planes by phase, the root plane excluded.",
			[]string{"phase"}, nil, metrics.ALPHA, "")}
}

// Register adds the collectors to the process's /metrics. A process serves
// one kplane, so registration happens once.
func Register(collectors ...metrics.StableCollector) error {
	for _, c := range collectors {
		if err := legacyregistry.CustomRegister(c); err != nil {
			return fmt.Errorf("registering plane metrics: %w", err)
		}
	}
	return nil
}

// Count records one request to plane.
func (m *Metrics) Count(plane string) {
	m.total.Add(1)
	c, ok := m.counters.Load(plane)
	if !ok {
		c, _ = m.counters.LoadOrStore(plane, &counter{})
	}
	c.(*counter).n.Add(1)
}

// Filter counts every request that reaches next by the plane in its
// context. It belongs after the plane lifecycle filter, so that only
// requests to planes that exist are counted.
func (m *Metrics) Filter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if plane, ok := planes.FromContext(req.Context()); ok {
			m.Count(plane)
		}
		next.ServeHTTP(w, req)
	})
}

// ForgetPlane drops the counter of a deleted plane.
func (m *Metrics) ForgetPlane(plane string) { m.counters.Delete(plane) }

// Run turns the window every Window until ctx is done; counters of planes
// that no longer exist are dropped.
func (m *Metrics) Run(ctx context.Context, planes Planes) {
	t := time.NewTicker(m.config.Window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.turn(planes.Exists)
		}
	}
}

// turn ranks the planes by their requests since the last turn.
func (m *Metrics) turn(exists func(plane string) bool) {
	var counts []planeCount
	m.counters.Range(func(key, value any) bool {
		plane, c := key.(string), value.(*counter)
		n := c.n.Load()
		delta := n - c.seen
		c.seen = n
		if delta > 0 {
			counts = append(counts, planeCount{plane: plane, n: delta})
		} else if exists != nil && !exists(plane) {
			m.counters.Delete(plane)
		}
		return true
	})
	sort.Slice(counts, func(i, j int) bool {
		if counts[i].n != counts[j].n {
			return counts[i].n > counts[j].n
		}
		return counts[i].plane < counts[j].plane
	})
	r := &ranking{}
	for i, pc := range counts {
		if i < m.config.TopPlanes {
			r.top = append(r.top, pc)
		} else {
			r.others += pc.n
		}
	}
	m.window.Store(r)
}

// DescribeWithStability implements metrics.StableCollector.
func (m *Metrics) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- m.totalDesc
	ch <- m.planeDesc
}

// CollectWithStability implements metrics.StableCollector.
func (m *Metrics) CollectWithStability(ch chan<- metrics.Metric) {
	ch <- metrics.NewLazyConstMetric(m.totalDesc, metrics.CounterValue, float64(m.total.Load()))
	r := m.window.Load()
	for _, pc := range r.top {
		ch <- metrics.NewLazyConstMetric(m.planeDesc, metrics.GaugeValue, float64(pc.n), pc.plane)
	}
	ch <- metrics.NewLazyConstMetric(m.planeDesc, metrics.GaugeValue, float64(r.others), Others)
}

// DescribeWithStability implements metrics.StableCollector.
func (c *PhaseCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- c.desc }

// CollectWithStability implements metrics.StableCollector.
func (c *PhaseCollector) CollectWithStability(ch chan<- metrics.Metric) {
	for phase, n := range c.planes.Phases() {
		ch <- metrics.NewLazyConstMetric(c.desc, metrics.GaugeValue, float64(n), phase)
	}
}

// Registerer is where other components (kine) register their Prometheus
// collectors to be served on /metrics. A collector registered twice is
// kept once, and one that cannot be registered is logged: metrics never
// stop the server.
func Registerer() prometheus.Registerer {
	return tolerantRegisterer{legacyregistry.Registerer()}
}

type tolerantRegisterer struct{ prometheus.Registerer }

func (r tolerantRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				logrus.WithError(err).Warn("registering metrics")
			}
		}
	}
}

// Lease is one kind of controller work held by one server at a time.
type Lease interface {
	Lease() string
	Identity() string
	Leading() bool
}

// LeaderCollector says which work this server runs:
// kplane_controllers_leader{controllers, server} is 1 while the server
// holds the Lease of that work, 0 otherwise.
type LeaderCollector struct {
	metrics.BaseStableCollector
	leases []Lease
	desc   *metrics.Desc
}

// NewLeaderCollector returns the collector of leases.
func NewLeaderCollector(leases []Lease) *LeaderCollector {
	return &LeaderCollector{leases: leases,
		desc: metrics.NewDesc("kplane_controllers_leader",
			"1 while this server runs the controllers named (holds their Lease), else 0.",
			[]string{"controllers", "server"}, nil, metrics.ALPHA, "")}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *LeaderCollector) DescribeWithStability(ch chan<- *metrics.Desc) { ch <- c.desc }

// CollectWithStability implements metrics.StableCollector.
func (c *LeaderCollector) CollectWithStability(ch chan<- metrics.Metric) {
	for _, l := range c.leases {
		v := 0.0
		if l.Leading() {
			v = 1
		}
		ch <- metrics.NewLazyConstMetric(c.desc, metrics.GaugeValue, v, l.Lease(), l.Identity())
	}
}
