package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

type podMemoryParams struct {
	Planes int
	// Pods per plane whose memory is measured, after a first one that
	// brings the plane's nodes.
	Pods    int
	Workers int
	// ProfileDir, when set, receives each server's heap profile before
	// and after the measured Pods (pod-memory-<mode>-{before,after}.pprof).
	ProfileDir string
	// Old is an earlier binary measured the same way, Rounds times each,
	// the two taking turns (old_* figures, medians).
	Old    string
	Rounds int
}

// podMemoryScenario measures what the simulation keeps per Pod: the same
// bare Pods on a server with --simulation=false (stored, Pending: the Pod
// object itself in the watch cache) and on one with it on (scheduled,
// Running, in the simulation's informers, scheduler and kubelet). Each
// plane first gets one Pod, which brings its nodes; the heap is read
// after that and again after Pods more Pods per plane, so the nodes are
// not counted.
func podMemoryScenario(binary string, p podMemoryParams) (Result, error) {
	measure := func(old bool) (map[string]float64, error) {
		bin := binary
		if old {
			bin = p.Old
		}
		return podMemoryFigures(bin, p)
	}
	figures, err := roundsFigures(p.Rounds, p.Old != "", measure)
	if err != nil {
		return Result{}, err
	}
	return Result{
		Scenario: "pod-memory",
		Params:   map[string]any{"planes": p.Planes, "pods_per_plane": p.Pods, "workers": p.Workers, "rounds": max(p.Rounds, 1), "old_binary": p.Old != ""},
		Figures:  figures,
		Notes: []string{
			"off_heap_kib_per_pod: heap in use per Pod with --simulation=false (the Pod stored and in the watch cache, Pending); on_heap_kib_per_pod: the same Pods Running on simulated nodes.",
			"simulation_heap_kib_per_pod = on - off: what the simulation keeps per Pod (its informers' copies, scheduler and kubelet state) plus the Running Pod's larger status (running_pod_json_growth_bytes of JSON more than the Pending one).",
			"*_marked_heap_kib_per_pod: the same from the heap the last of two forced collections found live (go_gc_heap_live_bytes): without the spans freed objects leave in use nor what the server allocated after the collection, so it moves less from run to run.",
			"The plane's nodes come with its first Pod, before the first reading: they are not in the per-Pod figures.",
			"With --old-binary, old_* are the earlier binary's figures, the two binaries taking turns for --rounds rounds (medians; _min, _max: the extremes).",
		},
	}, nil
}

// podMemoryFigures measures binary with the simulation off, then on.
func podMemoryFigures(binary string, p podMemoryParams) (map[string]float64, error) {
	figures := map[string]float64{}
	for _, mode := range []string{"off", "on"} {
		if err := podMemory(binary, p, mode, figures); err != nil {
			return nil, fmt.Errorf("simulation %s: %w", mode, err)
		}
	}
	figures["simulation_heap_kib_per_pod"] = figures["on_heap_kib_per_pod"] - figures["off_heap_kib_per_pod"]
	figures["simulation_marked_heap_kib_per_pod"] = figures["on_marked_heap_kib_per_pod"] - figures["off_marked_heap_kib_per_pod"]
	figures["running_pod_json_growth_bytes"] = figures["on_pod_json_bytes"] - figures["off_pod_json_bytes"]
	return figures, nil
}

func podMemory(binary string, p podMemoryParams, mode string, figures map[string]float64) error {
	simulation := map[string]string{"off": "false", "on": "true"}[mode]
	s, err := startServer(binary, "--simulation="+simulation)
	if err != nil {
		return err
	}
	defer s.stop()
	if _, _, err := createPlanes(s, 0, p.Planes, p.Workers, 0); err != nil {
		return err
	}
	names := make([]string, p.Planes)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%05d", i)
	}
	running := mode == "on"
	// Pods from..to-1 in every plane, then the memory once they are there
	// (and the heap's profile, named at).
	addPods := func(from, to int, at string) (memory, error) {
		if _, _, err := forEach(names, p.Workers, func(ctx context.Context, plane string) error {
			return createPods(ctx, s, plane, from, to, running)
		}); err != nil {
			return memory{}, err
		}
		m, err := measure(s)
		if err != nil {
			return memory{}, err
		}
		return m, profile(s, p.ProfileDir, "pod-memory-"+mode+"-"+at)
	}
	before, err := addPods(0, 1, "before")
	if err != nil {
		return err
	}
	after, err := addPods(1, 1+p.Pods, "after")
	if err != nil {
		return err
	}
	pods := float64(p.Planes * p.Pods)
	figures[mode+"_heap_kib_per_pod"] = (after.heapInuse - before.heapInuse) / 1024 / pods
	figures[mode+"_marked_heap_kib_per_pod"] = (after.markedHeap - before.markedHeap) / 1024 / pods
	size, err := podJSONSize(s, names[0], "pod-1")
	if err != nil {
		return err
	}
	figures[mode+"_pod_json_bytes"] = size
	fmt.Printf("   pod-memory, simulation %s: %.1f KiB of heap per Pod (%.1f marked live), %.0f bytes of JSON per Pod\n",
		mode, figures[mode+"_heap_kib_per_pod"], figures[mode+"_marked_heap_kib_per_pod"], size)
	return nil
}

// createPods creates Pods pod-<from> to pod-<to-1> in plane and, when
// running, waits until every Pod of the plane runs.
func createPods(ctx context.Context, s *server, plane string, from, to int, running bool) error {
	c, err := s.client(plane)
	if err != nil {
		return err
	}
	for i := from; i < to; i++ {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Labels: map[string]string{"app": "bench"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx",
				Env: []corev1.EnvVar{{Name: "PLANE", Value: plane}}}}},
		}
		if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("plane %s: %w", plane, err)
		}
	}
	if !running {
		return nil
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, pod := range list.Items {
			if pod.Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return len(list.Items) >= to, nil
	})
}

// podJSONSize is the size of Pod name of plane as the API answers it in
// JSON.
func podJSONSize(s *server, plane, name string) (float64, error) {
	c, err := s.client(plane)
	if err != nil {
		return 0, err
	}
	raw, err := c.CoreV1().RESTClient().Get().Namespace("default").Resource("pods").Name(name).
		SetHeader("Accept", "application/json").DoRaw(context.Background())
	if err != nil {
		return 0, fmt.Errorf("reading pod %s of plane %s: %w", name, plane, err)
	}
	return float64(len(raw)), nil
}
