package main

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

type curveParams struct {
	Steps      []int
	Max        int
	Workers    int
	ConfigMaps int
	Datastore  string
	Bootstrap  string
}

// densityCurve grows one server from no planes to each step of Steps
// (capped at Max) and reads its resident memory and Go heap in use at each
// step, after a forced GC, with the datastore in the same process. The
// planes are created by Workers concurrent clients (bootstrap with the
// first request, then ConfigMaps configmaps), and the first request's
// latency of every new plane is its create->ready time.
func densityCurve(binary string, p curveParams) (Result, error) {
	steps := capSteps(p.Steps, p.Max)
	args := []string{"--plane-bootstrap", p.Bootstrap}
	if p.Datastore != "" && p.Datastore != "sqlite" {
		args = append(args, "--datastore-endpoint", p.Datastore)
	}
	s, err := startServer(binary, args...)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()

	const mib = 1 << 20
	figures := map[string]float64{"server_ready_seconds": s.ready.Seconds()}
	var all []time.Duration
	var creating time.Duration
	var rss0, heap0 float64
	created := 0
	for _, step := range steps {
		if step > created {
			lat, took, err := createPlanes(s, created, step, p.Workers, p.ConfigMaps)
			if err != nil {
				return Result{}, err
			}
			all = append(all, lat...)
			creating += took
			created = step
		}
		rss, heap, err := settle(s)
		if err != nil {
			return Result{}, err
		}
		if step == steps[0] {
			rss0, heap0 = rss, heap
		}
		figures[fmt.Sprintf("rss_mib_at_%d", step)] = rss / mib
		figures[fmt.Sprintf("heap_inuse_mib_at_%d", step)] = heap / mib
		if step > steps[0] {
			figures["marginal_rss_mib_per_plane"] = (rss - rss0) / mib / float64(step-steps[0])
			figures["marginal_heap_mib_per_plane"] = (heap - heap0) / mib / float64(step-steps[0])
			figures["rss_mib_per_plane_total"] = rss / mib / float64(step)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	figures["planes"] = float64(created)
	if len(all) > 0 {
		figures["create_to_ready_p50_ms"] = ms(percentile(all, 0.50))
		figures["create_to_ready_p90_ms"] = ms(percentile(all, 0.90))
		figures["create_to_ready_p99_ms"] = ms(percentile(all, 0.99))
		figures["planes_per_second"] = float64(len(all)) / creating.Seconds()
	}
	return Result{
		Scenario: "curve",
		Params: map[string]any{"steps": steps, "workers": p.Workers, "configmapsPerPlane": p.ConfigMaps,
			"datastore": datastoreName(p.Datastore), "bootstrap": p.Bootstrap},
		Figures: figures,
		Notes: []string{
			"Memory is read after two forced GCs; marginal = (at the last step - at the first) / planes added; rss_mib_per_plane_total includes the server's fixed cost.",
			fmt.Sprintf("create->ready: first request to a new plane (which bootstraps it) until it answers, %d concurrent clients.", p.Workers),
		},
	}, nil
}

// capSteps keeps the steps up to max, sorted, and max itself if it falls
// between steps.
func capSteps(steps []int, max int) []int {
	sort.Ints(steps)
	var out []int
	for _, s := range steps {
		if s <= max && (len(out) == 0 || s != out[len(out)-1]) {
			out = append(out, s)
		}
	}
	if len(out) == 0 || (out[len(out)-1] < max && len(steps) > len(out)) {
		out = append(out, max)
	}
	return out
}

// createPlanes bootstraps planes bench-<from>..bench-<to-1> with workers
// concurrent clients and returns each one's create->ready latency and the
// wall time.
func createPlanes(s *server, from, to, workers, configmaps int) ([]time.Duration, time.Duration, error) {
	latencies := make([]time.Duration, to-from)
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	began := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				lat, err := createPlane(s, fmt.Sprintf("bench-%05d", i), configmaps)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				latencies[i-from] = lat
			}
		}()
	}
	for i := from; i < to; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return latencies, time.Since(began), firstErr
}
