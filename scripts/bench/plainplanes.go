package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

type plainPlanesParams struct {
	Planes  int
	Workers int
	// BaseOnly skips the copying server (for counts it would take long
	// to reach).
	BaseOnly bool
	// Old is an earlier binary whose base planes are measured the same
	// way (old_base_*).
	Old string
	// Rounds of the base planes of both binaries, in turn (alternate);
	// with Old only.
	Rounds int
	// ProfileDir, if set, receives a CPU profile of each server over its
	// first 5 s of plane creation.
	ProfileDir string
}

// plainPlanesScenario measures new planes made from nothing on a server
// whose planes stand on the base plane (the default) and, in the same
// run, on one whose planes each write a copy of the bootstrap
// (--plane-base=false): create to first answer per plane with Workers
// concurrent clients, planes per second, datastore revisions written per
// plane, and the marginal memory of a plane.
func plainPlanesScenario(binary string, p plainPlanesParams) (Result, error) {
	figures := map[string]float64{}
	modes := []struct{ prefix, flag string }{{"base_", "--plane-base=true"}, {"copy_", "--plane-base=false"}}
	if p.BaseOnly {
		modes = modes[:1]
	}
	if p.Old == "" {
		if err := plainPlanes(binary, p, modes[0].flag, modes[0].prefix, modes[0].prefix, figures); err != nil {
			return Result{}, fmt.Errorf("%s: %w", modes[0].flag, err)
		}
	} else {
		current, old, err := alternate(p.Rounds, func(isOld bool) (map[string]float64, error) {
			round := map[string]float64{}
			bin, label := binary, modes[0].prefix
			if isOld {
				bin, label = p.Old, "old_"+label
			}
			// Figures without prefix: alternate takes their medians.
			return round, plainPlanes(bin, p, modes[0].flag, "", label, round)
		})
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", modes[0].flag, err)
		}
		addPrefixed(figures, modes[0].prefix, current)
		addPrefixed(figures, "old_"+modes[0].prefix, old)
	}
	for _, mode := range modes[1:] {
		if err := plainPlanes(binary, p, mode.flag, mode.prefix, mode.prefix, figures); err != nil {
			return Result{}, fmt.Errorf("%s: %w", mode.flag, err)
		}
	}
	return Result{
		Scenario: "plain-planes",
		Params:   map[string]any{"planes": p.Planes, "workers": p.Workers, "base_only": p.BaseOnly, "old_binary": p.Old != "", "rounds": max(p.Rounds, 1), "datastore": "sqlite"},
		Figures:  figures,
		Notes: []string{
			"base_*: the default server, where a plane made from nothing stands on the base plane; copy_*: --plane-base=false, every plane writes its own copy of the bootstrap (the earlier way); old_base_*: --old-binary's default server, measured the same way; the two binaries' base servers take turns going first over the rounds (--rounds), each figure the median of its rounds (_min, _max: its extremes, with more than one round).",
			"create_to_served: POST the Plane in root, then GET namespace default in the plane until it answers (a request to a plane still being provisioned waits for it).",
			"revisions_per_plane: datastore revisions (one per record written) while the planes were made, divided by planes; the Plane object and its status included.",
			"server_cpu_ms_per_plane, client_cpu_ms_per_plane: user and system CPU of the server process and of this bench process (its clients) while the planes were made, divided by planes; the two share the machine's cores, so planes_per_second is bound by their sum.",
		},
	}, nil
}

// plainPlanes measures one server; its figures are named with prefix, its
// CPU profile (with p.ProfileDir; the last round's stays) with label.
func plainPlanes(binary string, p plainPlanesParams, flag, prefix, label string, figures map[string]float64) error {
	s, err := startServer(binary, flag)
	if err != nil {
		return err
	}
	defer s.stop()
	root, err := dynamic.NewForConfig(s.config("root"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// A first plane, not counted: it writes the base plane.
	if err := createBenchPlane(ctx, s, root, "warm-up", ""); err != nil {
		return err
	}
	m0, err := measure(s)
	if err != nil {
		return err
	}
	r0, err := revision(ctx, root)
	if err != nil {
		return err
	}
	names := make([]string, p.Planes)
	for i := range names {
		names[i] = fmt.Sprintf("plain-%05d", i)
	}
	var cpuProfile chan error
	if p.ProfileDir != "" {
		cpuProfile = make(chan error, 1)
		go func() {
			cpuProfile <- s.cpuProfile(filepath.Join(p.ProfileDir, "plain-planes-"+strings.Trim(label, "_")+"-cpu.pprof"), 5*time.Second)
		}()
	}
	serverBefore, err := s.cpuSeconds()
	if err != nil {
		return err
	}
	clientBefore, err := selfCPUSeconds()
	if err != nil {
		return err
	}
	served, took, err := forEach(names, p.Workers, func(ctx context.Context, name string) error {
		return createAndServe(ctx, s, root, name)
	})
	if err != nil {
		return err
	}
	clientAfter, err := selfCPUSeconds()
	if err != nil {
		return err
	}
	serverAfter, err := s.cpuSeconds()
	if err != nil {
		return err
	}
	if cpuProfile != nil {
		if err := <-cpuProfile; err != nil {
			return err
		}
	}
	// Listing every Plane is no 2 ms poll.
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return allReady(ctx, root, p.Planes+2)
	}); err != nil {
		return err
	}
	r1, err := revision(ctx, root)
	if err != nil {
		return err
	}
	m1, err := measure(s)
	if err != nil {
		return err
	}
	n := float64(p.Planes)
	figures[prefix+"create_to_served_p50_ms"] = ms(percentile(served, 0.50))
	figures[prefix+"create_to_served_p99_ms"] = ms(percentile(served, 0.99))
	figures[prefix+"planes_per_second"] = n / took.Seconds()
	figures[prefix+"revisions_per_plane"] = (r1 - r0) / n
	figures[prefix+"server_cpu_ms_per_plane"] = (serverAfter - serverBefore) * 1000 / n
	figures[prefix+"client_cpu_ms_per_plane"] = (clientAfter - clientBefore) * 1000 / n
	figures[prefix+"marginal_rss_kib_per_plane"] = (m1.rss - m0.rss) / 1024 / n
	figures[prefix+"marginal_heap_kib_per_plane"] = (m1.liveHeap - m0.liveHeap) / 1024 / n
	figures[prefix+"rss_mib_above_start"] = (m1.rss - m0.rss) / (1 << 20)
	fmt.Printf("   plain-planes %s: %d planes, create to served p50 %.1f ms p99 %.1f ms, %.0f planes/s, %.1f revisions, %.0f KiB RSS, %.2f ms of server and %.2f of client CPU each\n",
		flag, p.Planes, figures[prefix+"create_to_served_p50_ms"], figures[prefix+"create_to_served_p99_ms"],
		figures[prefix+"planes_per_second"], figures[prefix+"revisions_per_plane"], figures[prefix+"marginal_rss_kib_per_plane"],
		figures[prefix+"server_cpu_ms_per_plane"], figures[prefix+"client_cpu_ms_per_plane"])
	return nil
}

// createAndServe creates the Plane name and waits until the plane answers
// a request.
func createAndServe(ctx context.Context, s *server, root dynamic.Interface, name string) error {
	p := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kplane.dev/v1", "kind": "Plane",
		"metadata": map[string]any{"name": name}}}
	if _, err := root.Resource(planesGVR).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return err
	}
	c, err := s.client(name)
	if err != nil {
		return err
	}
	return waitFor(ctx, func() (bool, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// allReady reports whether want Planes (root included) say Ready.
func allReady(ctx context.Context, root dynamic.Interface, want int) (bool, error) {
	list, err := root.Resource(planesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	ready := 0
	for _, item := range list.Items {
		if phase, _, _ := unstructured.NestedString(item.Object, "status", "phase"); phase == "Ready" {
			ready++
		}
	}
	return ready >= want, nil
}
