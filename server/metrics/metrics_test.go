package metrics

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
)

// fixedPlanes has three Ready planes and one Pending.
type fixedPlanes struct{}

func (fixedPlanes) Phases() map[string]int {
	return map[string]int{"Ready": 3, "Pending": 1, "Terminating": 0}
}
func (fixedPlanes) Exists(string) bool { return true }

func newMetrics(t *testing.T, top int) (*Metrics, metrics.KubeRegistry) {
	t.Helper()
	m, err := New(Config{TopPlanes: top, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	registry := metrics.NewKubeRegistry()
	for _, c := range []metrics.StableCollector{m, NewPhaseCollector(fixedPlanes{})} {
		if err := registry.CustomRegister(c); err != nil {
			t.Fatal(err)
		}
	}
	return m, registry
}

// scrape returns the text exposition of registry, parsed back: what a
// Prometheus server would read.
func scrape(t *testing.T, registry metrics.KubeRegistry) (string, map[string]float64) {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	text := buf.String()
	parsed, err := testutil.TextToMetricFamilies(&buf)
	if err != nil {
		t.Fatalf("exposition does not parse: %v", err)
	}
	values := map[string]float64{}
	for name, f := range parsed {
		for _, metric := range f.Metric {
			var labels []string
			for _, l := range metric.Label {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case metric.Gauge != nil:
				values[key] = metric.Gauge.GetValue()
			case metric.Counter != nil:
				values[key] = metric.Counter.GetValue()
			}
		}
	}
	return text, values
}

func TestTopPlanesAndOthers(t *testing.T) {
	m, registry := newMetrics(t, 2)
	for plane, n := range map[string]int{"a": 5, "b": 9, "c": 1, "d": 2} {
		for i := 0; i < n; i++ {
			m.Count(plane)
		}
	}
	_, before := scrape(t, registry)
	if before["kplane_plane_requests{plane=_others}"] != 0 || before["kplane_requests_total{}"] != 17 {
		t.Fatalf("before the first window: %v", before)
	}
	m.turn(nil)
	_, got := scrape(t, registry)
	want := map[string]float64{
		"kplane_plane_requests{plane=b}":       9,
		"kplane_plane_requests{plane=a}":       5,
		"kplane_plane_requests{plane=_others}": 3,
		"kplane_requests_total{}":              17,
		"kplane_planes{phase=Ready}":           3,
		"kplane_planes{phase=Pending}":         1,
		"kplane_planes{phase=Terminating}":     0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["kplane_plane_requests{plane=c}"]; ok {
		t.Errorf("plane c is outside the top 2 but has a series")
	}

	// The next window counts only what happened since.
	m.Count("c")
	m.Count("c")
	m.turn(nil)
	_, got = scrape(t, registry)
	if got["kplane_plane_requests{plane=c}"] != 2 || got["kplane_plane_requests{plane=_others}"] != 0 {
		t.Errorf("second window: %v", got)
	}
	if _, ok := got["kplane_plane_requests{plane=b}"]; ok {
		t.Errorf("plane b was idle in the second window but still has a series")
	}
}

// Many planes never make more than TopPlanes+1 series, and counters of
// planes that are gone are dropped.
func TestBoundedCardinality(t *testing.T) {
	var mu sync.Mutex
	gone := map[string]bool{}
	m, registry := newMetrics(t, 5)
	exists := func(p string) bool { mu.Lock(); defer mu.Unlock(); return !gone[p] }
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				m.Count(fmt.Sprintf("p-%d", i))
			}
		}()
	}
	wg.Wait()
	m.turn(exists)
	text, got := scrape(t, registry)
	series := strings.Count(text, "kplane_plane_requests{")
	if series != 6 {
		t.Fatalf("%d kplane_plane_requests series, want 6:\n%s", series, text)
	}
	if got["kplane_plane_requests{plane=_others}"] != 4*995 || got["kplane_requests_total{}"] != 4000 {
		t.Fatalf("others/total: %v %v", got["kplane_plane_requests{plane=_others}"], got["kplane_requests_total{}"])
	}

	m.ForgetPlane("p-0")
	mu.Lock()
	for i := 1; i < 1000; i++ {
		gone[fmt.Sprintf("p-%d", i)] = true
	}
	mu.Unlock()
	m.turn(exists)
	n := 0
	m.counters.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Fatalf("%d counters kept for planes that are gone", n)
	}
}

func TestConfigValidation(t *testing.T) {
	if _, err := New(Config{TopPlanes: 0, Window: time.Minute}); err == nil {
		t.Error("TopPlanes 0 accepted")
	}
	if _, err := New(Config{TopPlanes: 3, Window: time.Millisecond}); err == nil {
		t.Error("a 1ms window accepted")
	}
}

func BenchmarkCount(b *testing.B) {
	m, err := New(Config{TopPlanes: 10, Window: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	planes := make([]string, 1000)
	for i := range planes {
		planes[i] = fmt.Sprintf("p-%d", i)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.Count(planes[i%len(planes)])
			i++
		}
	})
}
