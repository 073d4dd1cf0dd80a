package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var planesGVR = schema.GroupVersionResource{Group: "kplane.dev", Version: "v1", Resource: "planes"}

type lifecycleParams struct {
	Planes     int
	Workers    int
	Bootstrap  string
	Cycles     int
	ProfileDir string
}

// lifecycle runs Cycles rounds of: create Planes planes as Plane objects,
// wait until each is Ready, delete them all, wait until each is gone. It
// reports the marginal memory of a bootstrapped plane, how long a create
// and a delete take, and the memory held after each round.
//
// The leak check compares rounds, not the end with the start. The
// upstream watch cache keeps a history of recent events per resource (a
// ring that grows while it holds less than 75s of events, up to 100k, and
// is only overwritten by newer events), and with it list snapshots at
// those revisions; right after planes are deleted it holds their last
// state. That history is bounded by the peak event rate, not by how many
// planes ever lived: rounds are spaced by more than its window, so by the
// third round the ring is full and only recycled. A leak is memory that
// still grows from one round to the next.
func lifecycle(binary string, p lifecycleParams) (Result, error) {
	s, err := startServer(binary, "--plane-bootstrap", p.Bootstrap)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	root, err := dynamic.NewForConfig(s.config("root"))
	if err != nil {
		return Result{}, err
	}
	planeClient := root.Resource(planesGVR)

	const mib = 1 << 20
	n := float64(p.Planes)
	figures := map[string]float64{}
	m0, err := measure(s)
	if err != nil {
		return Result{}, err
	}
	if err := profile(s, p.ProfileDir, "lifecycle-start"); err != nil {
		return Result{}, err
	}
	m0.record(figures, "start_")

	// round creates and deletes names; between the two, created (if set)
	// measures the planes alive.
	round := func(names []string, alive func() error) (created, deleted []time.Duration, createTime, deleteTime time.Duration, err error) {
		created, createTime, err = forEach(names, p.Workers, func(ctx context.Context, name string) error {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "kplane.dev/v1", "kind": "Plane", "metadata": map[string]any{"name": name}}}
			if _, err := planeClient.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				return err
			}
			return waitFor(ctx, func() (bool, error) {
				u, err := planeClient.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
				return phase == "Ready", nil
			})
		})
		if err != nil {
			return nil, nil, 0, 0, fmt.Errorf("creating planes: %w", err)
		}
		if alive != nil {
			if err := alive(); err != nil {
				return nil, nil, 0, 0, err
			}
		}
		deleted, deleteTime, err = forEach(names, p.Workers, func(ctx context.Context, name string) error {
			if err := planeClient.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			return waitFor(ctx, func() (bool, error) {
				_, err := planeClient.Get(ctx, name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return true, nil
				}
				return false, err
			})
		})
		if err != nil {
			return nil, nil, 0, 0, fmt.Errorf("deleting planes: %w", err)
		}
		return created, deleted, createTime, deleteTime, nil
	}

	var liveDeleted []float64
	for cycle := 1; cycle <= p.Cycles; cycle++ {
		if cycle > 1 {
			time.Sleep(historyWindow)
		}
		names := make([]string, p.Planes)
		for i := range names {
			names[i] = fmt.Sprintf("life-%d-%05d", cycle, i)
		}
		c := fmt.Sprintf("cycle%d_", cycle)
		created, deleted, createTime, deleteTime, err := round(names, func() error {
			m1, err := measure(s)
			if err != nil {
				return err
			}
			m1.record(figures, c+"created_")
			if cycle == 1 {
				figures["marginal_rss_mib_per_plane"] = (m1.rss - m0.rss) / mib / n
				figures["marginal_heap_inuse_mib_per_plane"] = (m1.heapInuse - m0.heapInuse) / mib / n
				figures["marginal_live_heap_mib_per_plane"] = (m1.liveHeap - m0.liveHeap) / mib / n
			}
			return profile(s, p.ProfileDir, fmt.Sprintf("lifecycle-%d-created", cycle))
		})
		if err != nil {
			return Result{}, err
		}
		m2, err := measure(s)
		if err != nil {
			return Result{}, err
		}
		if err := profile(s, p.ProfileDir, fmt.Sprintf("lifecycle-%d-deleted", cycle)); err != nil {
			return Result{}, err
		}
		liveDeleted = append(liveDeleted, m2.liveHeap)

		m2.record(figures, c+"deleted_")
		figures[c+"create_to_ready_p50_ms"] = ms(percentile(created, 0.50))
		figures[c+"create_to_ready_p99_ms"] = ms(percentile(created, 0.99))
		figures[c+"delete_to_gone_p50_ms"] = ms(percentile(deleted, 0.50))
		figures[c+"delete_to_gone_p99_ms"] = ms(percentile(deleted, 0.99))
		figures[c+"planes_created_per_second"] = n / createTime.Seconds()
		figures[c+"planes_deleted_per_second"] = n / deleteTime.Seconds()
	}
	notes := []string{"Planes are created and deleted as Plane objects in root; ready = status.phase Ready, gone = GET 404."}
	figures["live_heap_deleted_vs_start"] = liveDeleted[0] / m0.liveHeap
	if len(liveDeleted) > 2 {
		prev, last := liveDeleted[len(liveDeleted)-2], liveDeleted[len(liveDeleted)-1]
		figures["live_heap_last_vs_previous_round"] = last / prev
		notes = append(notes, fmt.Sprintf("%s: live heap after the last round's deletes is %.0f%% of that after the round before (the bound is 110%%)",
			verdict(last <= prev*1.10), 100*last/prev))
	}
	return Result{
		Scenario: "lifecycle",
		Params: map[string]any{"planes": p.Planes, "workers": p.Workers, "bootstrap": p.Bootstrap,
			"cycles": p.Cycles, "datastore": "sqlite"},
		Figures: figures,
		Notes:   notes,
	}, nil
}

// memory is what the server holds after a garbage collection.
type memory struct {
	rss float64
	// heapInuse counts every heap span holding a live object; after many
	// objects are freed it stays above liveHeap until the spans are reused.
	heapInuse float64
	// liveHeap is the bytes of live objects: what a leak makes grow. Read
	// after settle's wait, it also holds what the server allocated since
	// the collection (its periodic work's garbage).
	liveHeap float64
	// markedHeap is the heap the last collection found live (Go's
	// /gc/heap/live:bytes): no garbage, so per-object figures taken from
	// it do not move with what the server happened to allocate meanwhile.
	markedHeap float64
}

func measure(s *server) (memory, error) {
	rss, inuse, err := settle(s)
	if err != nil {
		return memory{}, err
	}
	heap, err := s.metrics("go_memstats_heap_alloc_bytes", "go_gc_heap_live_bytes")
	return memory{rss: rss, heapInuse: inuse, liveHeap: heap["go_memstats_heap_alloc_bytes"], markedHeap: heap["go_gc_heap_live_bytes"]}, err
}

func (m memory) record(figures map[string]float64, prefix string) {
	const mib = 1 << 20
	figures[prefix+"rss_mib"] = m.rss / mib
	figures[prefix+"heap_inuse_mib"] = m.heapInuse / mib
	figures[prefix+"live_heap_mib"] = m.liveHeap / mib
}

func verdict(ok bool) string {
	if ok {
		return "no leak"
	}
	return "LEAK"
}

// historyWindow outlasts the upstream watch cache's minimum event history
// (75s).
const historyWindow = 80 * time.Second

// forEach runs fn for every name with workers concurrent callers and
// returns each call's duration (sorted) and the wall time of the whole run.
func forEach(names []string, workers int, fn func(context.Context, string) error) ([]time.Duration, time.Duration, error) {
	durations := make([]time.Duration, len(names))
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
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				start := time.Now()
				err := fn(ctx, names[i])
				durations[i] = time.Since(start)
				cancel()
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", names[i], err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range names {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	return durations, time.Since(began), firstErr
}

// waitFor polls cond every 2ms: fine-grained enough to see a plane that
// is ready in a few milliseconds.
func waitFor(ctx context.Context, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// profile saves a heap profile named name into dir, if dir is set.
func profile(s *server, dir, name string) error {
	if dir == "" {
		return nil
	}
	return s.heapProfile(filepath.Join(dir, name+".pprof"))
}
