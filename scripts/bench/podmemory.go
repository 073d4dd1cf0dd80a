package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
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
// bare Pods on a server with --simulation=false (stored, Pending), on one
// with it on (scheduled, Running, in the simulation's informers,
// scheduler and kubelet), and on one with it off whose Pods this bench
// binds and gives the simulated Pods' Running status (the Pod object
// itself after the same writes, without the simulation). Each plane first
// gets one Pod, which brings its nodes; the heap is read after that and
// again after Pods more Pods per plane, so the nodes are not counted.
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
			"simulation_heap_kib_per_pod = on - off: what the simulation keeps per Pod (its informers' copies, scheduler and kubelet state, its Events) plus the Running Pod's larger status (running_pod_json_growth_bytes of JSON more than the Pending one) and the versions its binding and status writes leave in the watch cache's history.",
			"written_*: --simulation=false, each Pod created, bound to a simulated Pod's node and given its Running status by the bench (container IDs and address its own): the Pod object itself as the simulation leaves it, after the same three writes. simulation_over_written_* = on - written: what the simulation keeps per Pod above the Pod object itself (the issue's measure): its informers, scheduler and kubelet state, its Events and their audit entries.",
			"*_marked_heap_kib_per_pod: the same from the heap the last of two forced collections found live (go_gc_heap_live_bytes): without the spans freed objects leave in use nor what the server allocated after the collection, so it moves less from run to run.",
			"The plane's nodes come with its first Pod, before the first reading: they are not in the per-Pod figures.",
			"With --old-binary, old_* are the earlier binary's figures, the two binaries taking turns for --rounds rounds (medians; _min, _max: the extremes).",
		},
	}, nil
}

// podMemoryFigures measures binary with the simulation off, then on,
// then off again with the Pods written by this bench into the state the
// simulation left them in (the "written" baseline: the Pod object itself).
func podMemoryFigures(binary string, p podMemoryParams) (map[string]float64, error) {
	figures := map[string]float64{}
	var running *corev1.Pod
	for _, mode := range []podMode{podsPending, podsSimulated, podsWritten} {
		sample, err := podMemory(binary, p, mode, running, figures)
		if err != nil {
			return nil, fmt.Errorf("pods %s: %w", mode, err)
		}
		if mode == podsSimulated {
			running = sample
		}
	}
	for _, f := range []string{"heap_kib_per_pod", "marked_heap_kib_per_pod"} {
		figures["simulation_"+f] = figures["on_"+f] - figures["off_"+f]
		figures["simulation_over_written_"+f] = figures["on_"+f] - figures["written_"+f]
	}
	figures["running_pod_json_growth_bytes"] = figures["on_pod_json_bytes"] - figures["off_pod_json_bytes"]
	return figures, nil
}

// podMode is how a server's Pods come to their state, and the prefix of
// its figures.
type podMode string

const (
	// podsPending: --simulation=false, the Pods created and left Pending.
	podsPending podMode = "off"
	// podsSimulated: the simulation schedules and runs them.
	podsSimulated podMode = "on"
	// podsWritten: --simulation=false, each Pod created, bound and given
	// a Running simulated Pod's status by this bench: the same object
	// after the same three writes (so the same versions in the watch
	// cache's history and the same audit entries) without the simulation.
	podsWritten podMode = "written"
)

// podMemory measures binary's heap per Pod in mode; with podsSimulated it
// returns a Running Pod as the simulation left it (the status podsWritten
// copies).
func podMemory(binary string, p podMemoryParams, mode podMode, running *corev1.Pod, figures map[string]float64) (*corev1.Pod, error) {
	s, err := startServer(binary, fmt.Sprintf("--simulation=%t", mode == podsSimulated))
	if err != nil {
		return nil, err
	}
	defer s.stop()
	if _, _, err := createPlanes(s, 0, p.Planes, p.Workers, 0); err != nil {
		return nil, err
	}
	names := make([]string, p.Planes)
	for i := range names {
		names[i] = fmt.Sprintf("bench-%05d", i)
	}
	// Pods from..to-1 in every plane, then the memory once they are there
	// (and the heap's profile, named at).
	addPods := func(from, to int, at string) (memory, error) {
		if _, _, err := forEach(names, p.Workers, func(ctx context.Context, plane string) error {
			return createPods(ctx, s, plane, from, to, mode, running)
		}); err != nil {
			return memory{}, err
		}
		m, err := measure(s)
		if err != nil {
			return memory{}, err
		}
		return m, profile(s, p.ProfileDir, "pod-memory-"+string(mode)+"-"+at)
	}
	before, err := addPods(0, 1, "before")
	if err != nil {
		return nil, err
	}
	after, err := addPods(1, 1+p.Pods, "after")
	if err != nil {
		return nil, err
	}
	prefix := string(mode) + "_"
	pods := float64(p.Planes * p.Pods)
	figures[prefix+"heap_kib_per_pod"] = (after.heapInuse - before.heapInuse) / 1024 / pods
	figures[prefix+"marked_heap_kib_per_pod"] = (after.markedHeap - before.markedHeap) / 1024 / pods
	size, err := podJSONSize(s, names[0], "pod-1")
	if err != nil {
		return nil, err
	}
	figures[prefix+"pod_json_bytes"] = size
	fmt.Printf("   pod-memory, pods %s: %.1f KiB of heap per Pod (%.1f marked live), %.0f bytes of JSON per Pod\n",
		mode, figures[prefix+"heap_kib_per_pod"], figures[prefix+"marked_heap_kib_per_pod"], size)
	if mode != podsSimulated {
		return nil, nil
	}
	c, err := s.client(names[0])
	if err != nil {
		return nil, err
	}
	sample, err := c.CoreV1().Pods("default").Get(context.Background(), "pod-1", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading a Running Pod of plane %s: %w", names[0], err)
	}
	return sample, nil
}

// createPods creates Pods pod-<from> to pod-<to-1> in plane and brings
// them to mode's state: with podsSimulated it waits until every Pod of the
// plane runs, with podsWritten it binds each to running's node and writes
// running's status with an address of its own.
func createPods(ctx context.Context, s *server, plane string, from, to int, mode podMode, running *corev1.Pod) error {
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
		created, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("plane %s: %w", plane, err)
		}
		if mode == podsWritten {
			if err := writeRunning(ctx, c, created, running, i); err != nil {
				return fmt.Errorf("plane %s: %w", plane, err)
			}
		}
	}
	if mode != podsSimulated {
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

// writeRunning binds pod to running's node and writes running's status to
// it, the container IDs and the address made pod's own (the i-th): the
// scheduler's and the kubelet's two writes, done by a client.
func writeRunning(ctx context.Context, c kubernetes.Interface, pod, running *corev1.Pod, i int) error {
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name},
		Target: corev1.ObjectReference{Kind: "Node", Name: running.Spec.NodeName}}
	if err := c.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding %s: %w", pod.Name, err)
	}
	status := running.Status.DeepCopy()
	ip := fmt.Sprintf("10.244.%d.%d", 1+i/250, 2+i%250)
	status.PodIP, status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	for j := range status.ContainerStatuses {
		cs := &status.ContainerStatuses[j]
		id := sha256.Sum256([]byte(string(pod.UID) + "/" + cs.Name))
		cs.ContainerID = cs.ContainerID[:strings.LastIndex(cs.ContainerID, "/")+1] + hex.EncodeToString(id[:16])
	}
	updated := pod.DeepCopy()
	updated.ResourceVersion = "" // unconditional, after the binding's write
	updated.Status = *status
	if _, err := c.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of %s: %w", pod.Name, err)
	}
	return nil
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
