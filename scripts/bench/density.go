package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type densityParams struct {
	Planes     int
	Workers    int
	ConfigMaps int
	Datastore  string
	Bootstrap  string
	// ProfileDir, when set, receives a heap profile of the loaded server.
	ProfileDir string
	// ExtraArgs are passed to the server.
	ExtraArgs []string
	// After runs on the loaded server once memory is measured, adding
	// its own figures.
	After func(s *server, figures map[string]float64) error
}

// density creates Planes planes (bootstrap + ConfigMaps configmaps each)
// with Workers concurrent clients and reports the server's marginal memory
// per plane and the create->ready latency of a new plane (the first
// request to an unknown plane, which bootstraps it, until it answers).
func density(binary string, p densityParams) (Result, error) {
	args := append([]string{"--plane-bootstrap", p.Bootstrap}, p.ExtraArgs...)
	if p.Datastore != "" {
		args = append(args, "--datastore-endpoint", p.Datastore)
	}
	s, err := startServer(binary, args...)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()

	rss0, heap0, err := settle(s)
	if err != nil {
		return Result{}, err
	}

	latencies, elapsed, err := createPlanes(s, 0, p.Planes, p.Workers, p.ConfigMaps)
	if err != nil {
		return Result{}, err
	}
	rss1, heap1, err := settle(s)
	if err != nil {
		return Result{}, err
	}
	if err := profile(s, p.ProfileDir, "density-"+strings.Join(append([]string{p.Bootstrap}, p.ExtraArgs...), "")); err != nil {
		return Result{}, err
	}

	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	const mib = 1 << 20
	r := Result{
		Scenario: "density",
		Params: map[string]any{"planes": p.Planes, "workers": p.Workers, "configmapsPerPlane": p.ConfigMaps,
			"datastore": datastoreName(p.Datastore), "bootstrap": p.Bootstrap},
		Figures: map[string]float64{
			"server_ready_seconds":        s.ready.Seconds(),
			"rss_start_mib":               rss0 / mib,
			"rss_end_mib":                 rss1 / mib,
			"heap_inuse_start_mib":        heap0 / mib,
			"heap_inuse_end_mib":          heap1 / mib,
			"marginal_rss_mib_per_plane":  (rss1 - rss0) / mib / float64(p.Planes),
			"marginal_heap_mib_per_plane": (heap1 - heap0) / mib / float64(p.Planes),
			"create_to_ready_p50_ms":      ms(percentile(latencies, 0.50)),
			"create_to_ready_p90_ms":      ms(percentile(latencies, 0.90)),
			"create_to_ready_p99_ms":      ms(percentile(latencies, 0.99)),
			"planes_per_second":           float64(p.Planes) / elapsed.Seconds(),
			"total_seconds":               elapsed.Seconds(),
		},
	}
	if p.After != nil {
		if err := p.After(s, r.Figures); err != nil {
			return r, err
		}
	}
	return r, nil
}

// createPlane bootstraps a plane with its first request and writes n
// configmaps into it. The latency is that of the first request: the time
// from "plane unknown" to "plane answers".
func createPlane(s *server, plane string, n int) (time.Duration, error) {
	c, err := s.client(plane)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	start := time.Now()
	if _, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return 0, fmt.Errorf("plane %s: %w", plane, err)
	}
	lat := time.Since(start)
	for i := 0; i < n; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)},
			Data: map[string]string{"plane": plane, "key": "value"}}
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return 0, fmt.Errorf("plane %s: %w", plane, err)
		}
	}
	return lat, nil
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func datastoreName(ep string) string {
	if ep == "" {
		return "sqlite"
	}
	return ep
}

// settle runs the server's garbage collector (through the profiling
// endpoint, so that what is counted is live data and not garbage of the
// load that just ran), waits, then reads its resident memory and Go heap
// in use.
func settle(s *server) (rss, heap float64, err error) {
	if err = s.collectGarbage(); err != nil {
		return
	}
	time.Sleep(3 * time.Second)
	if rss, err = s.rssBytes(); err != nil {
		return
	}
	heap, err = s.metric("go_memstats_heap_inuse_bytes")
	return
}
