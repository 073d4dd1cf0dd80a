package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

type watchParams struct {
	// Watchers are the watcher counts to measure, each spread over
	// watchers/PerPlane planes.
	Watchers  []int
	PerPlane  int
	Writes    int
	Workers   int
	Bootstrap string
}

// writtenAt is the annotation that carries the write's start time to
// the watchers.
const writtenAt = "bench.kplane.dev/written-at"

// watchFanOut opens, for each count in Watchers, that many watches on
// configmaps spread PerPlane to a plane, then writes Writes configmaps into
// each of those planes (Workers concurrent writers) and measures how long
// each event takes from the start of its write to each watcher: the
// delivery latency of a watch, fanned out across planes.
func watchFanOut(binary string, p watchParams) (Result, error) {
	s, err := startServer(binary, "--plane-bootstrap", p.Bootstrap)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	const mib = 1 << 20
	figures := map[string]float64{}
	var notes []string
	for round, n := range p.Watchers {
		planes := make([]string, max(1, n/p.PerPlane))
		for i := range planes {
			planes[i] = fmt.Sprintf("watch-%d-%05d", round, i)
		}
		lat, took, missing, rss, err := fanOut(s, planes, n, p)
		if err != nil {
			return Result{}, fmt.Errorf("%d watchers: %w", n, err)
		}
		prefix := fmt.Sprintf("watchers_%d_", n)
		figures[prefix+"delivery_p50_ms"] = ms(percentile(lat, 0.50))
		figures[prefix+"delivery_p99_ms"] = ms(percentile(lat, 0.99))
		figures[prefix+"deliveries_per_second"] = float64(len(lat)) / took.Seconds()
		figures[prefix+"undelivered"] = float64(missing)
		figures[prefix+"server_rss_mib"] = rss / mib
		if missing > 0 {
			notes = append(notes, fmt.Sprintf("%d watchers: %d events were not delivered within a minute", n, missing))
		}
	}
	notes = append(notes, fmt.Sprintf("Delivery latency: from the start of a configmap create until a watcher of that plane sees ADDED; %d watchers per plane, %d writes per plane, %d concurrent writers.",
		p.PerPlane, p.Writes, p.Workers))
	return Result{
		Scenario: "watch",
		Params: map[string]any{"watchers": p.Watchers, "watchersPerPlane": p.PerPlane, "writesPerPlane": p.Writes,
			"workers": p.Workers, "bootstrap": p.Bootstrap, "datastore": "sqlite"},
		Figures: figures,
		Notes:   notes,
	}, nil
}

// fanOut runs one round: n watchers over planes, Writes writes per plane.
// It returns every delivery's latency (sorted), the time the writes and
// deliveries took, how many deliveries never came, and the server's RSS
// with the watches open.
func fanOut(s *server, planes []string, n int, p watchParams) ([]time.Duration, time.Duration, int, float64, error) {
	// Bootstrap the planes and note where each one's history stands, so
	// that the watches start after it and see only the writes below.
	revisions := make(map[string]string, len(planes))
	clients := make(map[string]*kubernetes.Clientset, len(planes))
	for _, plane := range planes {
		c, err := s.client(plane)
		if err != nil {
			return nil, 0, 0, 0, err
		}
		clients[plane] = c
	}
	var mu sync.Mutex
	if _, _, err := forEach(planes, p.Workers, func(ctx context.Context, plane string) error {
		l, err := clients[plane].CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		mu.Lock()
		revisions[plane] = l.ResourceVersion
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, 0, 0, 0, err
	}

	type watcher struct {
		w         watch.Interface
		latencies []time.Duration
		done      chan struct{}
	}
	watchers := make([]*watcher, n)
	names := make([]string, n)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	if _, _, err := forEach(names, p.Workers, func(ctx context.Context, name string) error {
		i, _ := strconv.Atoi(name)
		plane := planes[i%len(planes)]
		w, err := clients[plane].CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{
			ResourceVersion: revisions[plane], LabelSelector: "bench=watch", AllowWatchBookmarks: false})
		if err != nil {
			return err
		}
		watchers[i] = &watcher{w: w, done: make(chan struct{})}
		return nil
	}); err != nil {
		for _, w := range watchers {
			if w != nil {
				w.w.Stop()
			}
		}
		return nil, 0, 0, 0, fmt.Errorf("opening watches: %w", err)
	}
	for _, w := range watchers {
		go func() {
			defer close(w.done)
			for ev := range w.w.ResultChan() {
				if ev.Type != watch.Added {
					continue
				}
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					continue
				}
				at, err := strconv.ParseInt(cm.Annotations[writtenAt], 10, 64)
				if err != nil {
					continue
				}
				w.latencies = append(w.latencies, time.Since(time.Unix(0, at)))
				if len(w.latencies) == p.Writes {
					return
				}
			}
		}()
	}
	defer func() {
		for _, w := range watchers {
			w.w.Stop()
		}
	}()
	rss, err := s.rssBytes()
	if err != nil {
		return nil, 0, 0, 0, err
	}

	// Write k of every plane before write k+1 of any.
	writes := make([]string, len(planes)*p.Writes)
	for i := range writes {
		writes[i] = strconv.Itoa(i)
	}
	began := time.Now()
	if _, _, err := forEach(writes, p.Workers, func(ctx context.Context, write string) error {
		i, _ := strconv.Atoi(write)
		plane, k := planes[i%len(planes)], i/len(planes)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("watched-%d", k),
			Labels:      map[string]string{"bench": "watch"},
			Annotations: map[string]string{writtenAt: strconv.FormatInt(time.Now().UnixNano(), 10)}}}
		_, err := clients[plane].CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, 0, 0, 0, fmt.Errorf("writing: %w", err)
	}
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	missing := 0
	var all []time.Duration
	for _, w := range watchers {
		select {
		case <-w.done:
			continue
		case <-timeout.C:
		}
		// Out of time: stop every watcher still waiting.
		for _, w := range watchers {
			w.w.Stop()
		}
		break
	}
	for _, w := range watchers {
		<-w.done
	}
	took := time.Since(began)
	for _, w := range watchers {
		all = append(all, w.latencies...)
		missing += p.Writes - len(w.latencies)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return all, took, missing, rss, nil
}
