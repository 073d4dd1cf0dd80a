package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

type requestParams struct {
	// Planes is how many planes the spread half divides the load over.
	Planes    int
	Ops       int
	Workers   int
	Bootstrap string
}

// seedObjects is how many configmaps each plane holds before the load:
// what GET reads one of and LIST returns.
const seedObjects = 10

// requestOverhead sends the same GET, LIST and CREATE load (Ops requests
// of each verb, Workers concurrent clients) once to one plane and once
// spread round-robin over Planes planes, and reports the throughput and
// latency of each. The difference is what serving many planes costs a
// request: routing by plane id, per-plane caches, per-plane admission.
func requestOverhead(binary string, p requestParams) (Result, error) {
	s, err := startServer(binary, "--plane-bootstrap", p.Bootstrap)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()

	one := []string{"req-one"}
	spread := make([]string, p.Planes)
	for i := range spread {
		spread[i] = fmt.Sprintf("req-%05d", i)
	}
	clients := map[string]*kubernetes.Clientset{}
	for _, plane := range append(one, spread...) {
		c, err := s.client(plane)
		if err != nil {
			return Result{}, err
		}
		clients[plane] = c
	}
	if _, _, err := forEach(append(one, spread...), p.Workers, func(ctx context.Context, plane string) error {
		_, err := createPlane(s, plane, seedObjects)
		return err
	}); err != nil {
		return Result{}, fmt.Errorf("seeding planes: %w", err)
	}

	figures := map[string]float64{}
	var created atomic.Int64
	verbs := []struct {
		name string
		do   func(ctx context.Context, c *kubernetes.Clientset, i int) error
	}{
		{"get", func(ctx context.Context, c *kubernetes.Clientset, i int) error {
			_, err := c.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("cm-%d", i%seedObjects), metav1.GetOptions{})
			return err
		}},
		{"list", func(ctx context.Context, c *kubernetes.Clientset, i int) error {
			l, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			if err == nil && len(l.Items) < seedObjects {
				err = fmt.Errorf("listed %d configmaps, want at least %d", len(l.Items), seedObjects)
			}
			return err
		}},
		{"create", func(ctx context.Context, c *kubernetes.Clientset, i int) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d", created.Add(1))},
				Data: map[string]string{"key": "value"}}
			_, err := c.CoreV1().ConfigMaps("kube-public").Create(ctx, cm, metav1.CreateOptions{})
			return err
		}},
	}
	for _, v := range verbs {
		for _, half := range []struct {
			name   string
			planes []string
		}{{"one_plane", one}, {"spread", spread}} {
			do := func(ctx context.Context, i int) error {
				return v.do(ctx, clients[half.planes[i%len(half.planes)]], i)
			}
			// A fifth of the load first, unmeasured, so that neither half
			// pays for warming connections and caches.
			if _, _, err := load(max(1, p.Ops/5), p.Workers, do); err != nil {
				return Result{}, fmt.Errorf("%s %s: %w", v.name, half.name, err)
			}
			lat, took, err := load(p.Ops, p.Workers, do)
			if err != nil {
				return Result{}, fmt.Errorf("%s %s: %w", v.name, half.name, err)
			}
			prefix := v.name + "_" + half.name + "_"
			figures[prefix+"per_second"] = float64(p.Ops) / took.Seconds()
			figures[prefix+"p50_ms"] = ms(percentile(lat, 0.50))
			figures[prefix+"p99_ms"] = ms(percentile(lat, 0.99))
		}
	}
	return Result{
		Scenario: "requests",
		Params: map[string]any{"planes": p.Planes, "requestsPerVerb": p.Ops, "workers": p.Workers,
			"objectsPerPlane": seedObjects, "bootstrap": p.Bootstrap, "datastore": "sqlite"},
		Figures: figures,
		Notes: []string{fmt.Sprintf("Each verb runs %d requests (after a fifth as many unmeasured) from %d concurrent clients, first all to one plane, then round-robin over %d planes; "+
			"GET reads one of %d configmaps, LIST lists them, CREATE writes a new one.", p.Ops, p.Workers, p.Planes, seedObjects)},
	}, nil
}

// load calls fn ops times from workers goroutines and returns each call's
// latency (sorted) and the wall time.
func load(ops, workers int, fn func(ctx context.Context, i int) error) ([]time.Duration, time.Duration, error) {
	lat := make([]time.Duration, ops)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= ops {
					return
				}
				start := time.Now()
				err := fn(ctx, i)
				lat[i] = time.Since(start)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, took, firstErr
}
