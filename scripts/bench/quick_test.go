package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestMain lets the test binary serve as the noisy-neighbor scenario's
// flood process, as the bench binary does.
func TestMain(m *testing.M) {
	if orders := os.Getenv(floodEnv); orders != "" {
		runFloodChild(orders)
		return
	}
	os.Exit(m.Run())
}

// TestQuickBench runs every side-by-side scenario with --quick counts
// against the real binary and checks that the harness wrote its JSON,
// table and plots. It asserts that figures were produced, not what they
// are: those depend on the machine.
func TestQuickBench(t *testing.T) {
	binary := os.Getenv("KPLANE_BINARY")
	framework.Require(t, binary != "", "KPLANE_BINARY is not set: run it through 'make test', or 'make test-unit' for the unit tests without it")
	t.Setenv("TMPDIR", t.TempDir())
	var o sideBySideOptions
	o.register(flag.NewFlagSet("bench", flag.ContinueOnError))
	o.Quick = true
	o.applyQuick()

	report := Report{Date: time.Now().UTC().Format(time.RFC3339), Binary: binary,
		Machine: Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH}}
	for _, scenario := range sideBySideScenarios {
		results, err := o.run(scenario, binary, 8, 3, "minimal")
		if err != nil {
			t.Fatalf("%s: %v", scenario, err)
		}
		report.Results = append(report.Results, results...)
	}
	fleet, err := fleetScenario(binary, fleetParams{Replicas: 5, Bootstrap: "minimal"})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	snapshot, err := snapshotScenario(binary, snapshotParams{Objects: 50, BusyPlanes: 3, BusyRate: 20, Calls: 20})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	streams, err := streamsScenario(binary, streamsParams{Streams: 8, Users: 4, Objects: 20})
	if err != nil {
		t.Fatalf("streams: %v", err)
	}
	container, err := containerScenario(binary, containerParams{Planes: 3})
	if err != nil {
		t.Fatalf("container: %v", err)
	}
	// The binary stands in for an earlier one: the side-by-side resets run.
	scenarios, err := scenariosScenario(binary, scenariosParams{Objects: 20, Members: 5, CopyMembers: 2, Changes: 3, Resets: 3, Old: binary})
	if err != nil {
		t.Fatalf("scenarios: %v", err)
	}
	// The binary stands in for an earlier one: the two take turns.
	plain, err := plainPlanesScenario(binary, plainPlanesParams{Planes: 10, Workers: 4, Old: binary, Rounds: 2})
	if err != nil {
		t.Fatalf("plain-planes: %v", err)
	}
	workloads, err := workloadsScenario(binary, workloadsParams{Planes: 5, Workers: 4, Bootstrap: "minimal"})
	if err != nil {
		t.Fatalf("workloads: %v", err)
	}
	podMemory, err := podMemoryScenario(binary, podMemoryParams{Planes: 3, Pods: 2, Workers: 3})
	if err != nil {
		t.Fatalf("pod-memory: %v", err)
	}
	webhooks, err := webhooksScenario(binary, webhooksParams{Creates: 10, Planes: 5, Workers: 2, SlowCalls: 5, SlowFor: 3 * time.Second, OtherCalls: 10})
	if err != nil {
		t.Fatalf("webhooks: %v", err)
	}
	audit, err := auditScenario(binary, auditParams{Ops: 20, Workers: 2, Rounds: 1, FullPlanes: 1, BufferEvents: 50})
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	services, err := servicesScenario(binary, servicesParams{Creates: 10})
	if err != nil {
		t.Fatalf("services: %v", err)
	}
	noisy, err := noisyNeighborScenario(binary, noisyParams{Writers: 4, Listers: 4, Ops: 20, Objects: 10})
	if err != nil {
		t.Fatalf("noisy-neighbor: %v", err)
	}
	// The binary stands in for an earlier one: the two take turns.
	restarts, err := restartScenario(binary, restartParams{Planes: 10, Workers: 4, Old: binary, Rounds: 2})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	report.Results = append(report.Results, fleet, snapshot, streams, container, scenarios, plain, workloads, podMemory, webhooks, audit, services, noisy, restarts)

	dir := t.TempDir()
	out := filepath.Join(dir, "results.json")
	if err := writeReport(out, report); err != nil {
		t.Fatal(err)
	}

	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var written Report
	if err := json.Unmarshal(data, &written); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	want := map[string]int{"curve": 2, "requests": 1, "watch": 1, "baseline": 1, "fleet": 1, "snapshot": 1, "streams": 1, "container": 1, "webhooks": 1, "audit": 1, "services": 1, "noisy-neighbor": 1, "pod-memory": 1, "restart": 1}
	got := map[string]int{}
	baselineRan := false
	for _, r := range written.Results {
		got[r.Scenario]++
		if r.Scenario == "baseline" && r.Params["skipped"] == true {
			t.Logf("baseline: %s", strings.Join(r.Notes, "; "))
			continue
		}
		baselineRan = baselineRan || r.Scenario == "baseline"
		if len(r.Figures) == 0 {
			t.Errorf("%s %v has no figures", r.Scenario, r.Params)
		}
	}
	for s, n := range want {
		if got[s] != n {
			t.Errorf("results.json holds %d %s results, want %d", got[s], s, n)
		}
	}
	if baselineRan && got["comparison"] != 1 {
		t.Errorf("the baseline ran but results.json holds no comparison")
	}

	plots := []string{"density.png", "create-latency.png", "requests-throughput.png", "requests-p99.png", "watch.png", "fleet.png", "snapshot.png"}
	if baselineRan {
		plots = append(plots, "baseline-density.png", "baseline-ready.png")
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, section := range []string{"planes per GiB", "## Density curve", "## Request overhead", "## Watch fan-out", "## Fleet", "## Snapshot"} {
		if !strings.Contains(string(md), section) {
			t.Errorf("results.md has no %q", section)
		}
	}
	for _, p := range plots {
		data, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Error(err)
			continue
		}
		if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) || len(data) < 1000 {
			t.Errorf("%s is not a PNG image (%d bytes)", p, len(data))
		}
		if !strings.Contains(string(md), "("+p+")") {
			t.Errorf("results.md does not show %s", p)
		}
	}
}
