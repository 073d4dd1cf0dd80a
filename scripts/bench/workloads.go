package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

type workloadsParams struct {
	Planes     int
	Workers    int
	Bootstrap  string
	ProfileDir string
	// Old, when set, is an earlier binary whose rollout (the same
	// Deployments on the same number of planes) is timed after this one's.
	Old string
	// Rounds of the two binaries' rollouts, in turn (alternate); with Old
	// only. The first round's rollout of this binary is the full run's.
	Rounds int
}

// idleReading is a server's memory and goroutines after a settle.
type idleReading struct{ rss, heap, goroutines float64 }

func readIdle(s *server) (idleReading, error) {
	rss, heap, err := settle(s)
	if err != nil {
		return idleReading{}, err
	}
	g, err := s.metric("go_goroutines")
	return idleReading{rss: rss, heap: heap, goroutines: g}, err
}

// workloadsScenario measures the workload simulation: what it costs an
// idle plane (Planes idle planes on a server with --simulation=false, then
// on one with it on), then, on the second server, a 3-replica Deployment
// in every plane at once: the time until all are Available, each Pod's
// created -> Running as its plane's watch sees it, and the memory and
// goroutines the running Pods add.
func workloadsScenario(binary string, p workloadsParams) (Result, error) {
	const mib = 1 << 20
	figures := map[string]float64{}
	for _, mode := range []string{"off", "on"} {
		args := []string{"--plane-bootstrap", p.Bootstrap, "--simulation=" + map[string]string{"off": "false", "on": "true"}[mode]}
		s, err := startServer(binary, args...)
		if err != nil {
			return Result{}, err
		}
		err = func() error {
			before, err := readIdle(s)
			if err != nil {
				return err
			}
			if _, _, err := createPlanes(s, 0, p.Planes, p.Workers, 0); err != nil {
				return err
			}
			idle, err := readIdle(s)
			if err != nil {
				return err
			}
			figures[mode+"_idle_marginal_heap_kib_per_plane"] = (idle.heap - before.heap) / 1024 / float64(p.Planes)
			figures[mode+"_idle_marginal_rss_kib_per_plane"] = (idle.rss - before.rss) / 1024 / float64(p.Planes)
			figures[mode+"_goroutines_empty"] = before.goroutines
			figures[mode+"_goroutines_idle_planes"] = idle.goroutines
			figures[mode+"_heap_idle_planes_mib"] = idle.heap / mib
			if mode == "off" {
				return nil
			}
			if err := deployEverywhere(s, p, figures); err != nil {
				return err
			}
			loaded, err := readIdle(s)
			if err != nil {
				return err
			}
			pods := float64(3 * p.Planes)
			figures["running_heap_kib_per_pod"] = (loaded.heap - idle.heap) / 1024 / pods
			figures["running_rss_kib_per_pod"] = (loaded.rss - idle.rss) / 1024 / pods
			figures["goroutines_running"] = loaded.goroutines
			return profile(s, p.ProfileDir, "workloads")
		}()
		s.stop()
		if err != nil {
			return Result{}, fmt.Errorf("simulation %s: %w", mode, err)
		}
	}
	figures["idle_heap_rise_kib_per_plane"] = figures["on_idle_marginal_heap_kib_per_plane"] - figures["off_idle_marginal_heap_kib_per_plane"]
	if p.Old != "" {
		if err := rolloutsSideBySide(binary, p, figures); err != nil {
			return Result{}, err
		}
	}
	notes := []string{
		fmt.Sprintf("%d planes x a 3-replica Deployment all Available in %.1f s (the goal is 30 s for 1,000)", p.Planes, figures["all_available_seconds"]),
	}
	if p.Old != "" {
		notes = append(notes, fmt.Sprintf("the old binary, on a server of its own: all Available in %.1f s; over %d round(s) the two binaries took turns going first, each rollout figure the median of its rounds (_min, _max: its extremes, with more than one round)", figures["old_all_available_seconds"], max(p.Rounds, 1)),
			fmt.Sprintf("server CPU for the rollout: %.1f s, the old binary's %.1f s (rollout_server_cpu_seconds: user and system time of the server process from the first create until all are Available)",
				figures["rollout_server_cpu_seconds"], figures["old_rollout_server_cpu_seconds"]))
	}
	notes = append(notes,
		fmt.Sprintf("idle plane: %+.1f KiB of heap with the simulation on against off; goroutines with %d idle planes: %.0f on, %.0f off",
			figures["idle_heap_rise_kib_per_plane"], p.Planes, figures["on_goroutines_idle_planes"], figures["off_goroutines_idle_planes"]),
		"running_heap_kib_per_pod is everything the running Deployments add (Deployment, ReplicaSet, Pods, nodes, events, in the watch caches and the controllers' informers) over 3 Pods per plane",
		"events_per_plane: the Events the API created from the first create on, read once no new one came for 5 s, per plane; a plane's rollout makes 7 (ScalingReplicaSet, 3 SuccessfulCreate, 3 Scheduled)",
		"rollout_requests_per_plane (every request the API answered, watches included) and rollout_revisions_per_plane (every record the datastore wrote, the Planes' status included), from the first create until all are Available: the work asked of the server, which moves little from run to run where its CPU time moves by 10-25 %",
	)
	return Result{
		Scenario: "workloads",
		Params:   map[string]any{"planes": p.Planes, "workers": p.Workers, "bootstrap": p.Bootstrap, "replicas": 3, "old_binary": p.Old != "", "rounds": max(p.Rounds, 1)},
		Figures:  figures,
		Notes:    notes,
	}, nil
}

// rolloutFigures are the figures a rollout alone measures.
var rolloutFigures = []string{"all_available_seconds", "rollout_server_cpu_seconds", "pod_created_to_running_p50_ms", "pod_created_to_running_p99_ms",
	"events_per_plane", "rollout_requests_per_plane", "rollout_revisions_per_plane"}

// rolloutsSideBySide times the rollout on p.Old too, the two binaries
// taking turns over p.Rounds; the full run's rollout is this binary's
// first round. Its rollout figures become the medians.
func rolloutsSideBySide(binary string, p workloadsParams, figures map[string]float64) error {
	fullRun := map[string]float64{}
	for _, name := range rolloutFigures {
		fullRun[name] = figures[name]
	}
	current, old, err := alternate(p.Rounds, func(isOld bool) (map[string]float64, error) {
		switch {
		case isOld:
			return rolloutAlone(p.Old, p)
		case fullRun != nil:
			first := fullRun
			fullRun = nil
			return first, nil
		default:
			return rolloutAlone(binary, p)
		}
	})
	if err != nil {
		return fmt.Errorf("rollouts side by side: %w", err)
	}
	addPrefixed(figures, "", current)
	addPrefixed(figures, "old_", old)
	return nil
}

// rolloutAlone times the same rollout on binary, on a server of its own.
func rolloutAlone(binary string, p workloadsParams) (map[string]float64, error) {
	s, err := startServer(binary, "--plane-bootstrap", p.Bootstrap, "--simulation=true")
	if err != nil {
		return nil, err
	}
	defer s.stop()
	if _, _, err := createPlanes(s, 0, p.Planes, p.Workers, 0); err != nil {
		return nil, err
	}
	measured := map[string]float64{}
	p.ProfileDir = ""
	if err := deployEverywhere(s, p, measured); err != nil {
		return nil, err
	}
	figures := map[string]float64{}
	for _, name := range rolloutFigures {
		figures[name] = measured[name]
	}
	return figures, nil
}

// deployEverywhere creates Deployment web (3 replicas) in every bench plane
// and waits for all of them to be Available, timing each Pod from its
// ADDED to its first Running event on the plane's watch.
func deployEverywhere(s *server, p workloadsParams, figures map[string]float64) error {
	names := make([]string, p.Planes)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%05d", i)
	}
	var mu sync.Mutex
	var podLatencies []time.Duration
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sem := make(chan struct{}, p.Workers)
	var cpuProfile chan error
	if p.ProfileDir != "" {
		// The first 20 s are the rollout at full load in every plane.
		cpuProfile = make(chan error, 1)
		go func() { cpuProfile <- s.cpuProfile(filepath.Join(p.ProfileDir, "workloads-cpu.pprof"), 20*time.Second) }()
		if err := s.saveMetrics(filepath.Join(p.ProfileDir, "workloads-metrics-before.txt")); err != nil {
			return err
		}
	}
	work, err := countWork(ctx, s)
	if err != nil {
		return err
	}
	cpuBefore, err := s.cpuSeconds()
	if err != nil {
		return err
	}
	// No Event was created yet in a new server: the metric appears with
	// the first.
	eventsBefore, _ := s.metric(eventsCreated)
	for _, plane := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat, err := deployOne(ctx, s, plane, sem)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", plane, err)
				return
			}
			mu.Lock()
			podLatencies = append(podLatencies, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	figures["all_available_seconds"] = time.Since(began).Seconds()
	cpuAfter, err := s.cpuSeconds()
	if err != nil {
		return err
	}
	figures["rollout_server_cpu_seconds"] = cpuAfter - cpuBefore
	if err := work.done(ctx, s, float64(p.Planes), figures); err != nil {
		return err
	}
	if cpuProfile != nil {
		if err := <-cpuProfile; err != nil {
			return err
		}
		if err := s.saveMetrics(filepath.Join(p.ProfileDir, "workloads-metrics-after.txt")); err != nil {
			return err
		}
	}
	sort.Slice(podLatencies, func(i, j int) bool { return podLatencies[i] < podLatencies[j] })
	figures["pod_created_to_running_p50_ms"] = ms(percentile(podLatencies, 0.50))
	figures["pod_created_to_running_p99_ms"] = ms(percentile(podLatencies, 0.99))
	figures["pods"] = float64(len(podLatencies))
	queueFigures(s, figures)
	figures["events_per_plane"] = eventsSettled(s, eventsBefore) / float64(p.Planes)
	return nil
}

// eventsCreated is the metric counting the Events the API created.
const eventsCreated = `apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"}`

// eventsSettled returns the Events created since before (the metric's
// value then), once no new one came for eventsQuiet or after
// eventsSettleTimeout: the controllers' Events trail the work that made
// them.
func eventsSettled(s *server, before float64) float64 {
	const eventsQuiet, eventsSettleTimeout = 5 * time.Second, 2 * time.Minute
	last, since := -1.0, time.Now()
	for deadline := time.Now().Add(eventsSettleTimeout); time.Now().Before(deadline); time.Sleep(time.Second) {
		n, err := s.metric(eventsCreated)
		if err != nil {
			continue
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= eventsQuiet {
			break
		}
	}
	return last - before
}

// queueFigures records the mean time an item waited in each simulation
// queue and the retries: where a slow run spent its time.
func queueFigures(s *server, figures map[string]float64) {
	for _, q := range []string{"deployment", "replicaset", "kplane_simulation_scheduler", "kplane_simulation_kubelet", "endpoint_slice",
		"kplane_simulation_inheritance"} {
		sum, err1 := s.metric(`workqueue_queue_duration_seconds_sum{name="` + q + `"}`)
		count, err2 := s.metric(`workqueue_queue_duration_seconds_count{name="` + q + `"}`)
		if err1 == nil && err2 == nil && count > 0 {
			figures["queue_wait_mean_ms_"+q] = sum / count * 1000
		}
		sum, err1 = s.metric(`workqueue_work_duration_seconds_sum{name="` + q + `"}`)
		count, err2 = s.metric(`workqueue_work_duration_seconds_count{name="` + q + `"}`)
		if err1 == nil && err2 == nil && count > 0 {
			figures["work_mean_ms_"+q] = sum / count * 1000
		}
		if retries, err := s.metric(`workqueue_retries_total{name="` + q + `"}`); err == nil {
			figures["queue_retries_"+q] = retries
		}
	}
}

func deployOne(ctx context.Context, s *server, plane string, sem chan struct{}) ([]time.Duration, error) {
	c, err := s.client(plane)
	if err != nil {
		return nil, err
	}
	// A watch the server ends (a slow consumer under load) is opened again
	// from the last revision seen, so no event is missed.
	var podRV, deploymentRV string
	openPods := func() (watch.Interface, error) {
		return c.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{ResourceVersion: podRV})
	}
	openDeployments := func() (watch.Interface, error) {
		return c.AppsV1().Deployments("default").Watch(ctx, metav1.ListOptions{ResourceVersion: deploymentRV})
	}
	pods, err := openPods()
	if err != nil {
		return nil, err
	}
	defer func() { pods.Stop() }()
	deployments, err := openDeployments()
	if err != nil {
		return nil, err
	}
	defer func() { deployments.Stop() }()
	sem <- struct{}{}
	labels := map[string]string{"app": "web"}
	_, err = c.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}},
	}, metav1.CreateOptions{})
	<-sem
	if err != nil {
		return nil, err
	}
	added := map[string]time.Time{}
	var latencies []time.Duration
	available := false
	for !available || len(latencies) < 3 {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%d pods running, available %v: %w", len(latencies), available, ctx.Err())
		case ev, ok := <-pods.ResultChan():
			if !ok {
				if pods, err = openPods(); err != nil {
					return nil, fmt.Errorf("pod watch: %w", err)
				}
				continue
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			podRV = pod.ResourceVersion
			if ev.Type == watch.Added {
				added[pod.Name] = time.Now()
			}
			if t, seen := added[pod.Name]; seen && pod.Status.Phase == corev1.PodRunning {
				latencies = append(latencies, time.Since(t))
				delete(added, pod.Name)
			}
		case ev, ok := <-deployments.ResultChan():
			if !ok {
				if deployments, err = openDeployments(); err != nil {
					return nil, fmt.Errorf("deployment watch: %w", err)
				}
				continue
			}
			if d, isD := ev.Object.(*appsv1.Deployment); isD {
				deploymentRV = d.ResourceVersion
				if d.Status.AvailableReplicas == 3 && d.Status.UpdatedReplicas == 3 {
					available = true
				}
			}
		}
	}
	return latencies, nil
}

// work is what the server was asked to do, counted from a start: the
// requests it answered and the records it wrote. Unlike its CPU time,
// which moves by 10-25 % from run to run on a shared 2-core machine,
// these tell one build's work from another's.
type work struct {
	requests, revision float64
}

// countWork counts from now.
func countWork(ctx context.Context, s *server) (work, error) {
	requests, err := s.metricSum("apiserver_request_total")
	if err != nil {
		return work{}, err
	}
	root, err := dynamic.NewForConfig(s.config("root"))
	if err != nil {
		return work{}, err
	}
	rev, err := revision(ctx, root)
	if err != nil {
		return work{}, err
	}
	return work{requests: requests, revision: rev}, nil
}

// done sets rollout_requests_per_plane (every request, watches included)
// and rollout_revisions_per_plane (every record written, the Planes'
// status included) since w.
func (w work) done(ctx context.Context, s *server, planes float64, figures map[string]float64) error {
	now, err := countWork(ctx, s)
	if err != nil {
		return err
	}
	figures["rollout_requests_per_plane"] = (now.requests - w.requests) / planes
	figures["rollout_revisions_per_plane"] = (now.revision - w.revision) / planes
	return nil
}
