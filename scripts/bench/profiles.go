package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

type profilesParams struct {
	// Stored are the plane counts restarts are timed with, ascending.
	Stored  []int
	Workers int
	// Old is an earlier binary whose empty server is measured beside
	// (its default profile, full).
	Old string
	// Idle: how long after /readyz the empty server's memory is read a
	// second time, having stayed idle (empty_idle_*): a server pages code
	// back in as its periodic work reaches it, so the first reading alone
	// flatters it. Go forces a GC two minutes after the last one (the
	// one that returned the start-up heap when the server became ready);
	// that GC reads the type data and stack maps of what is live, 3 MiB of
	// the binary at once: a reading before it flatters the server too.
	Idle time.Duration
	// Rounds: how many times each server is measured (the figures are
	// medians): an idle server's RSS moves by about 10 MiB from one run to
	// the next.
	Rounds int
}

// profilesScenario measures the server of each profile side by side in
// one run (and an earlier binary's, when given): the empty server's memory
// (RSS split into anonymous memory and the binary's mapped pages, heap),
// start -> ready, and then, with Stored[i] planes in the datastore,
// restart -> ready, restart -> a stored plane answering, and the memory
// per stored plane.
func profilesScenario(binary string, p profilesParams) (Result, error) {
	type target struct{ prefix, binary, profile string }
	targets := []target{{"full_", binary, "full"}, {"generic_", binary, "generic"}}
	if p.Old != "" {
		targets = append([]target{{"old_", p.Old, ""}}, targets...)
	}
	// Each round measures every target once, starting one target later
	// than the round before, so that none is always measured first.
	perTarget := make([][]map[string]float64, len(targets))
	for round := range max(p.Rounds, 1) {
		for i := range targets {
			k := (i + round) % len(targets)
			t := targets[k]
			var args []string
			if t.profile != "" {
				args = []string{"--profile", t.profile}
			}
			figures := map[string]float64{}
			if err := measureProfile(t.binary, args, p, t.prefix, figures); err != nil {
				return Result{}, fmt.Errorf("round %d, %s%s: %w", round+1, t.prefix, t.profile, err)
			}
			perTarget[k] = append(perTarget[k], figures)
		}
	}
	figures := map[string]float64{}
	for _, rounds := range perTarget {
		addPrefixed(figures, "", medians(rounds))
	}
	return Result{
		Scenario: "profiles",
		Params: map[string]any{"stored": p.Stored, "workers": p.Workers, "old_binary": p.Old != "", "datastore": "sqlite",
			"idle_seconds": p.Idle.Seconds(), "rounds": max(p.Rounds, 1)},
		Figures: figures,
		Notes: []string{
			"full_*: --profile full (the default); generic_*: --profile generic; old_*: --old-binary's server, default flags, measured the same way.",
			"With --rounds n, every server is measured n times, the order of the servers turning by one each round; each figure is the median of its rounds (_min, _max: its extremes).",
			"empty_*: a new data dir, read 5 s after /readyz answered ok, as it is (the server returns its start-up heap itself once ready); empty_idle_*: the same server, idle since, read when idle_seconds have passed since /readyz: its RSS (anon and binary pages) as it is, before the benchmark sends it anything, then the heap 5 s after two forced GCs; anon_rss_after_heap_profile: the anon memory then, as this scenario read it before 2026-11-30 (the forced GC returned 1.5-4 MiB to the kernel that the idle server held a moment before). Readings after a restart are taken like the idle one, 5 s after /readyz. rss = anon + file: anon is the process's own memory (heap, stacks, runtime), file the pages of the binary mapped in (shared with every process running it, clean, reclaimable).",
			"start_to_ready_s: process start -> /readyz ok on a new data dir (credentials generated); restart_*: the same server stopped with SIGTERM and started again on its data dir.",
			"stored_<n>_*: n planes created in root (workers concurrent clients, every one Ready) then the server restarted: restart_to_ready_s, restart_to_plane_s (until the last stored plane answers GET namespace default), and memory after the restart; per_plane_kib: (stored memory - empty memory after restart) / n.",
		},
	}, nil
}

// measureProfile runs one server through the empty and stored phases.
func measureProfile(binary string, args []string, p profilesParams, prefix string, figures map[string]float64) error {
	s, err := startServer(binary, args...)
	if err != nil {
		return err
	}
	// s is the running server: each restart replaces it, and a failed
	// restart leaves nothing running but the data dir to remove.
	dir := s.dir
	defer func() {
		if s != nil {
			s.stop()
		}
		os.RemoveAll(dir)
	}()
	figures[prefix+"start_to_ready_s"] = s.ready.Seconds()
	// The first reading forces no GC (the server returned its start-up
	// heap itself when it became ready), so that the idle one, later,
	// sees only the pages the server's own work brought back.
	time.Sleep(time.Until(s.started.Add(s.ready + settleAfterGC)))
	empty, err := peekMemory(s)
	if err != nil {
		return err
	}
	empty.record(figures, prefix+"empty_")
	idle, err := readMemory(s, p.Idle)
	if err != nil {
		return err
	}
	idle.record(figures, prefix+"empty_idle_")
	fmt.Printf("   profiles %s: empty server idle %s after ready: rss %.1f MiB (anon %.1f, binary %.1f)\n",
		prefix, p.Idle, idle.rss, idle.anon, idle.file)
	if s, err = s.restart(); err != nil {
		return err
	}
	figures[prefix+"restart_to_ready_s"] = s.ready.Seconds()
	base, err := readMemory(s, settleAfterGC)
	if err != nil {
		return err
	}
	fmt.Printf("   profiles %s: empty rss %.1f MiB (anon %.1f, binary %.1f), live heap %.1f MiB, start -> ready %.2f s, restart -> ready %.2f s\n",
		prefix, empty.rss, empty.anon, empty.file, empty.liveHeap, figures[prefix+"start_to_ready_s"], s.ready.Seconds())
	made := 0
	for _, n := range p.Stored {
		if err := createStoredPlanes(s, made, n, p.Workers); err != nil {
			return err
		}
		made = n
		if s, err = s.restart(); err != nil {
			return err
		}
		key := fmt.Sprintf("%sstored_%d_", prefix, n)
		figures[key+"restart_to_ready_s"] = s.ready.Seconds()
		last := fmt.Sprintf("stored-%05d", n-1)
		if err := planeAnswers(s, last); err != nil {
			return err
		}
		figures[key+"restart_to_plane_s"] = time.Since(s.started).Seconds()
		m, err := readMemory(s, settleAfterGC)
		if err != nil {
			return err
		}
		m.record(figures, key)
		figures[key+"per_plane_rss_kib"] = (m.rss - base.rss) * 1024 / float64(n)
		figures[key+"per_plane_anon_kib"] = (m.anon - base.anon) * 1024 / float64(n)
		figures[key+"per_plane_live_heap_kib"] = (m.liveHeap - base.liveHeap) * 1024 / float64(n)
		fmt.Printf("   profiles %s: %d planes stored: restart -> ready %.2f s, -> plane answers %.2f s, rss %.1f MiB (anon %.1f), %.1f KiB anon per plane\n",
			prefix, n, s.ready.Seconds(), figures[key+"restart_to_plane_s"], m.rss, m.anon, figures[key+"per_plane_anon_kib"])
	}
	return nil
}

// processMemory is what the benchmark reads of a server, in MiB.
type processMemory struct {
	rss, anon, file, heapInuse, liveHeap float64
	// anonAfterProfile: the anonymous memory 5 s after the heap-profile
	// request that forced a GC (readMemory only), as this scenario read
	// it before, for comparison.
	anonAfterProfile float64
}

func (m processMemory) record(figures map[string]float64, prefix string) {
	figures[prefix+"rss_mib"] = m.rss
	figures[prefix+"anon_rss_mib"] = m.anon
	figures[prefix+"file_rss_mib"] = m.file
	figures[prefix+"heap_inuse_mib"] = m.heapInuse
	figures[prefix+"live_heap_mib"] = m.liveHeap
	if m.anonAfterProfile > 0 {
		figures[prefix+"anon_rss_after_heap_profile_mib"] = m.anonAfterProfile
	}
}

// settleAfterGC is how long memory is read after a forced GC.
const settleAfterGC = 5 * time.Second

// readMemory reads the server's memory at after it became ready: its RSS
// as it is, before this reading sends the server anything (what the
// kernel charges the process and its cgroup), then its heap after a
// forced GC. A forced GC lowers the heap goal and the runtime returns the
// difference to the kernel: read after it, as this scenario did until
// 2026-11-30, the anonymous memory of an idle server was 1.5 to 4 MiB
// lower than it had been a moment before: the benchmark's own GC decided
// part of the figure (anon_rss_after_heap_profile keeps it).
func readMemory(s *server, after time.Duration) (processMemory, error) {
	time.Sleep(time.Until(s.started.Add(s.ready + after)))
	m, err := residentMemory(s)
	if err != nil {
		return m, err
	}
	if err := s.collectGarbage(); err != nil {
		return m, err
	}
	time.Sleep(settleAfterGC)
	afterProfile, err := residentMemory(s)
	if err != nil {
		return m, err
	}
	m.anonAfterProfile = afterProfile.anon
	m.heapInuse, m.liveHeap, err = heapMemory(s)
	return m, err
}

// peekMemory reads the server's memory as it is, without a GC.
func peekMemory(s *server) (processMemory, error) {
	m, err := residentMemory(s)
	if err != nil {
		return m, err
	}
	m.heapInuse, m.liveHeap, err = heapMemory(s)
	return m, err
}

// residentMemory reads the server's RSS from /proc, sending it nothing.
func residentMemory(s *server) (processMemory, error) {
	const mib = 1 << 20
	var m processMemory
	status, err := procStatus(s.cmd.Process.Pid)
	if err != nil {
		return m, err
	}
	m.rss, m.anon, m.file = status["VmRSS"]/mib, status["RssAnon"]/mib, status["RssFile"]/mib
	return m, nil
}

// heapMemory reads the server's heap in use and live heap from /metrics.
func heapMemory(s *server) (inuse, live float64, err error) {
	const mib = 1 << 20
	values, err := s.metrics("go_memstats_heap_inuse_bytes", "go_memstats_heap_alloc_bytes")
	return values["go_memstats_heap_inuse_bytes"] / mib, values["go_memstats_heap_alloc_bytes"] / mib, err
}

// procStatus reads the kB fields of /proc/<pid>/status, in bytes.
func procStatus(pid int) (map[string]float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[2] == "kB" {
			kb, err := strconv.ParseFloat(fields[1], 64)
			if err != nil {
				return nil, err
			}
			out[strings.TrimSuffix(fields[0], ":")] = kb * 1024
		}
	}
	return out, sc.Err()
}

// createStoredPlanes creates Planes stored-<from>..stored-<to-1> in root
// (the lifecycle provisions them; nothing waits on each) and waits until
// every Plane is Ready.
func createStoredPlanes(s *server, from, to, workers int) error {
	root, err := dynamic.NewForConfig(s.config("root"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	names := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		names = append(names, fmt.Sprintf("stored-%05d", i))
	}
	began := time.Now()
	_, took, err := forEach(names, workers, func(ctx context.Context, name string) error {
		p := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kplane.dev/v1", "kind": "Plane",
			"metadata": map[string]any{"name": name}}}
		_, err := root.Resource(planesGVR).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		return allReady(ctx, root, to)
	})
	fmt.Printf("   profiles: %d planes created in %.1f s, all Ready after %.1f s\n", to-from, took.Seconds(), time.Since(began).Seconds())
	return err
}

// planeAnswers waits until plane answers GET namespace default.
func planeAnswers(s *server, plane string) error {
	return untilPlaneTakes(s, plane, func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// planeTakesAWrite creates a ConfigMap in plane, retrying until the
// server takes it: a write to a plane waits until the server knows every
// stored plane (a ready server loads them lazily).
func planeTakesAWrite(s *server, plane string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "restarted-"}}
	return untilPlaneTakes(s, plane, func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		return err
	})
}

// untilPlaneTakes sends request to plane every 5 ms until it succeeds, for
// at most five minutes.
func untilPlaneTakes(s *server, plane string, request func(context.Context, kubernetes.Interface) error) error {
	c, err := s.client(plane)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return request(ctx, c) == nil, nil
	})
}
