package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// gotestParams configure the gotest scenario.
type gotestParams struct {
	// Example is the operator module whose suite is run.
	Example string
	// Planes are created one after another to time a new plane with CRDs.
	Planes int
	// Parallel is the suite's -test.parallel on kplane.
	Parallel int
	// Baseline locates (or builds) kube-apiserver and etcd for envtest.
	Baseline baselineParams
}

// suiteTimings is one line the example's suite writes to $RAYSERVE_TIMINGS.
type suiteTimings struct {
	Backend string    `json:"backend"`
	Startup float64   `json:"startupSeconds"`
	Setup   []float64 `json:"setupSeconds"`
	Suite   float64   `json:"suiteSeconds"`
}

// suiteRun is one run of the example's test binary.
type suiteRun struct {
	timings suiteTimings
	wall    time.Duration
	peakRSS map[string]float64 // by process name: kplane, kube-apiserver, etcd
	testRSS float64            // the test binary itself
	// testCPU is the CPU time of the test binary itself, childCPU that of
	// the processes it started, by name: as last sampled, up to 100 ms
	// short of their end.
	testCPU  float64
	childCPU map[string]float64
	passed   int
	failures []string
}

// gotestScenario measures operator tests: the example operator's suite
// (examples/rayserve-operator) on kplanetest, every case in parallel in a
// plane of its own, and the same suite serialized on one controller-runtime
// envtest cluster (kube-apiserver and etcd built from go.mod's modules), in
// one run; and the time to a ready *rest.Config of a new plane with the
// operator's CRD Established, one plane after another.
func gotestScenario(kplane string, p gotestParams) (Result, error) {
	dir, err := os.MkdirTemp("", "gotest-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	testBinary := filepath.Join(dir, "rayserve.test")
	build := exec.Command("go", "test", "-c", "-o", testBinary, "./internal/controller")
	build.Dir = p.Example
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	fmt.Printf("building the test binary of %s\n", p.Example)
	if err := build.Run(); err != nil {
		return Result{}, fmt.Errorf("building the example's tests: %w", err)
	}
	assets, err := envtestAssets(dir, p.Baseline)
	if err != nil {
		return Result{}, err
	}
	env := []string{"KPLANE_BINARY=" + kplane, "KUBEBUILDER_ASSETS=" + assets, "RAYSERVE_REQUIRE_ENVTEST=1"}
	planes, err := runSuite(testBinary, p.Example, env, "-test.run=^$", "-test.bench=^BenchmarkNewPlane$", fmt.Sprintf("-test.benchtime=%dx", p.Planes))
	if err != nil {
		return Result{}, fmt.Errorf("BenchmarkNewPlane: %w", err)
	}
	created, err := runSuite(testBinary, p.Example, append(env, "KPLANE_PREWARM=-1"), "-test.run=^$", "-test.bench=^BenchmarkNewPlane$", fmt.Sprintf("-test.benchtime=%dx", p.Planes))
	if err != nil {
		return Result{}, fmt.Errorf("BenchmarkNewPlane without ready planes: %w", err)
	}
	// The old path in the same run: the CRDs installed into every plane
	// instead of inherited from a template plane.
	noTemplate := append(env, "KPLANE_CRD_TEMPLATE=off")
	installed, err := runSuite(testBinary, p.Example, append(noTemplate, "KPLANE_PREWARM=-1"), "-test.run=^$", "-test.bench=^BenchmarkNewPlane$", fmt.Sprintf("-test.benchtime=%dx", p.Planes))
	if err != nil {
		return Result{}, fmt.Errorf("BenchmarkNewPlane with the CRDs installed per plane: %w", err)
	}
	parallelInstalled, err := runSuite(testBinary, p.Example, noTemplate, "-test.run=^TestRayServeOnKplane$", fmt.Sprintf("-test.parallel=%d", p.Parallel))
	if err != nil {
		return Result{}, fmt.Errorf("suite on kplane with the CRDs installed per plane: %w", err)
	}
	parallel, err := runSuite(testBinary, p.Example, env, "-test.run=^TestRayServeOnKplane$", fmt.Sprintf("-test.parallel=%d", p.Parallel))
	if err != nil {
		return Result{}, fmt.Errorf("suite on kplane: %w", err)
	}
	serial, err := runSuite(testBinary, p.Example, env, "-test.run=^TestRayServeOnKplane$", "-test.parallel=1")
	if err != nil {
		return Result{}, fmt.Errorf("serialized suite on kplane: %w", err)
	}
	envtest, err := runSuite(testBinary, p.Example, env, "-test.run=^TestRayServeOnEnvtest$")
	if err != nil {
		return Result{}, fmt.Errorf("suite on envtest: %w", err)
	}
	// The comparison with envtest on equal terms: no plane's workloads move.
	apiOnly, err := runSuite(testBinary, p.Example, append(env, "RAYSERVE_SIMULATION=off"), "-test.run=^TestRayServeOnKplane$", fmt.Sprintf("-test.parallel=%d", p.Parallel))
	if err != nil {
		return Result{}, fmt.Errorf("suite on kplane without the workload simulation: %w", err)
	}
	r := gotestResult(p, planes, created, parallel, serial, envtest)
	addInstalledPath(&r, installed, parallelInstalled)
	addAPIOnly(&r, apiOnly)
	return r, nil
}

// envtestAssets is a KUBEBUILDER_ASSETS directory: kube-apiserver and etcd
// of the baseline, built once and cached.
func envtestAssets(dir string, p baselineParams) (string, error) {
	kubeAPIServer, etcd, skipped, err := baselineBinaries(p)
	if err != nil {
		return "", err
	}
	if skipped != "" {
		return "", fmt.Errorf("envtest binaries: %s", skipped)
	}
	assets := filepath.Join(dir, "assets")
	if err := os.MkdirAll(assets, 0o755); err != nil {
		return "", err
	}
	for name, target := range map[string]string{"kube-apiserver": kubeAPIServer, "etcd": etcd} {
		if err := os.Symlink(target, filepath.Join(assets, name)); err != nil {
			return "", err
		}
	}
	return assets, nil
}

// runSuite runs the test binary in the example's package directory and
// reads what it wrote to $RAYSERVE_TIMINGS, sampling the memory of the
// processes it started meanwhile.
func runSuite(binary, example string, env []string, args ...string) (suiteRun, error) {
	timingsFile := filepath.Join(filepath.Dir(binary), fmt.Sprintf("timings-%d.jsonl", time.Now().UnixNano()))
	cmd := exec.Command(binary, append(args, "-test.v", "-test.timeout=20m")...)
	cmd.Dir = filepath.Join(example, "internal", "controller")
	cmd.Env = append(append(os.Environ(), env...), "RAYSERVE_TIMINGS="+timingsFile)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	fmt.Printf("running %s %s\n", filepath.Base(binary), strings.Join(args, " "))
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return suiteRun{}, err
	}
	run := suiteRun{peakRSS: map[string]float64{}, childCPU: map[string]float64{}}
	stop := sampleProcesses(cmd.Process.Pid, &run)
	err := cmd.Wait()
	run.wall = time.Since(start)
	stop()
	run.passed, run.failures = countResults(out.String())
	data, readErr := os.ReadFile(timingsFile)
	// A suite that ran to its end with failed cases still measured: its
	// failures are reported in the result's notes.
	if err != nil && (readErr != nil || len(run.failures) == 0) {
		return run, fmt.Errorf("%w: failed %v\n%s", err, run.failures, failureLines(out.String()))
	}
	if err != nil {
		fmt.Printf("failed cases %v:\n%s\n", run.failures, failureLines(out.String()))
	}
	if readErr != nil {
		return run, fmt.Errorf("no timings written: %w\n%s", readErr, tail(out.String(), 30))
	}
	if err := json.Unmarshal(bytes.TrimSpace(data), &run.timings); err != nil {
		return run, fmt.Errorf("timings %s: %w", timingsFile, err)
	}
	return run, nil
}

// sampleProcesses records, every 100 ms until stopped, the peak resident
// memory of the test binary and of its children by name, and the
// children's CPU time.
func sampleProcesses(pid int, run *suiteRun) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	cpu := map[int]float64{}
	names := map[int]string{}
	wg.Go(func() {
		for {
			sum := map[string]float64{}
			for _, child := range children(pid) {
				if rss, err := processRSS(child); err == nil {
					sum[processName(child)] += rss
				}
				if seconds, err := processCPUSeconds(child); err == nil {
					cpu[child], names[child] = seconds, processName(child)
				}
			}
			for name, rss := range sum {
				run.peakRSS[name] = max(run.peakRSS[name], rss)
			}
			clear(run.childCPU)
			for child, seconds := range cpu {
				run.childCPU[names[child]] += seconds
			}
			if rss, err := processRSS(pid); err == nil {
				run.testRSS = max(run.testRSS, rss)
			}
			if seconds, err := processCPUSeconds(pid); err == nil {
				run.testCPU = seconds
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if child, err := strconv.Atoi(e.Name()); err == nil && parent(child) == pid {
			out = append(out, child)
		}
	}
	return out
}

func processName(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(data))
}

// countResults counts the passed subtests of the verbose output and names
// the failed ones.
func countResults(out string) (passed int, failed []string) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "--- PASS: ") && strings.Contains(line, "/") {
			passed++
		}
		if strings.HasPrefix(line, "--- FAIL: ") {
			failed = append(failed, strings.Fields(line)[2])
		}
	}
	return passed, failed
}

func secondsPercentile(values []float64, q float64) float64 {
	sorted := append([]float64(nil), values...)
	sort.Float64s(sorted)
	d := make([]time.Duration, len(sorted))
	for i, v := range sorted {
		d[i] = time.Duration(v * float64(time.Second))
	}
	return ms(percentile(d, q))
}

func gotestResult(p gotestParams, planes, created, parallel, serial, envtest suiteRun) Result {
	const mib = 1 << 20
	f := map[string]float64{
		"plane_with_crds_ready_ms_p50": secondsPercentile(planes.timings.Setup, 0.50),
		"plane_with_crds_ready_ms_p90": secondsPercentile(planes.timings.Setup, 0.90),
		"plane_with_crds_ready_ms_p99": secondsPercentile(planes.timings.Setup, 0.99),
		// The same with no plane made ahead (KPLANE_PREWARM=-1): what the
		// server's plane creation, bootstrap and CRD install cost.
		"plane_with_crds_created_ms_p50": secondsPercentile(created.timings.Setup, 0.50),
		"plane_with_crds_created_ms_p90": secondsPercentile(created.timings.Setup, 0.90),
		"plane_with_crds_created_ms_p99": secondsPercentile(created.timings.Setup, 0.99),

		"kplane_suite_cases":                  float64(len(parallel.timings.Setup)),
		"kplane_suite_cases_passed":           float64(parallel.passed),
		"kplane_parallel_plane_ms_p50":        secondsPercentile(parallel.timings.Setup, 0.50),
		"kplane_parallel_plane_ms_p99":        secondsPercentile(parallel.timings.Setup, 0.99),
		"kplane_parallel_suite_seconds":       parallel.timings.Suite,
		"kplane_parallel_process_seconds":     parallel.wall.Seconds(),
		"kplane_serial_suite_seconds":         serial.timings.Suite,
		"kplane_serial_process_seconds":       serial.wall.Seconds(),
		"kplane_server_peak_rss_mib":          parallel.peakRSS["kplane"] / mib,
		"kplane_test_binary_peak_rss_mib":     parallel.testRSS / mib,
		"envtest_suite_cases_passed":          float64(envtest.passed),
		"envtest_startup_seconds":             envtest.timings.Startup,
		"envtest_namespace_ms_p50":            secondsPercentile(envtest.timings.Setup, 0.50),
		"envtest_namespace_ms_p99":            secondsPercentile(envtest.timings.Setup, 0.99),
		"envtest_suite_seconds":               envtest.timings.Suite,
		"envtest_process_seconds":             envtest.wall.Seconds(),
		"envtest_kube_apiserver_peak_rss_mib": envtest.peakRSS["kube-apiserver"] / mib,
		"envtest_etcd_peak_rss_mib":           envtest.peakRSS["etcd"] / mib,
		"envtest_test_binary_peak_rss_mib":    envtest.testRSS / mib,

		"kplane_parallel_test_binary_cpu_seconds": parallel.testCPU,
		"kplane_parallel_server_cpu_seconds":      parallel.childCPU["kplane"],
		"envtest_test_binary_cpu_seconds":         envtest.testCPU,
		"envtest_kube_apiserver_cpu_seconds":      envtest.childCPU["kube-apiserver"],
		"envtest_etcd_cpu_seconds":                envtest.childCPU["etcd"],
	}
	// However fast the server, the parallel suite cannot end before the
	// test binary's own CPU time (its controllers, clients and test code)
	// has been spent on the machine's cores: the speedup it allows.
	if bound := f["kplane_parallel_test_binary_cpu_seconds"] / float64(runtime.NumCPU()); bound > 0 {
		f["speedup_bound_by_test_binary_cpu"] = f["envtest_suite_seconds"] / bound
	}
	// Whole suites as a developer waits for them: kplane's from the start
	// of its first plane to the end of its last case (the server starts in
	// TestMain, about a second, and is counted in *_process_seconds);
	// envtest's from its start-up to its last case.
	f["speedup_parallel_kplane_vs_serial_envtest"] = f["envtest_suite_seconds"] / f["kplane_parallel_suite_seconds"]
	f["speedup_parallel_kplane_vs_serial_kplane"] = f["kplane_serial_suite_seconds"] / f["kplane_parallel_suite_seconds"]
	f["goal_plane_with_crds_ms_p50"] = 20
	f["goal_speedup"] = 10
	notes := []string{
		"Every kplane figure without 'installed' is kplanetest's default: the CRDs installed once in a template plane (kplanetest-crds-<digest>) and every plane made from it (spec.template), waiting only until the plane serves them.",
		"plane_with_crds_ready_*: BenchmarkNewPlane, kplanetest.Plane one after another as fast as they are taken, until the *rest.Config is returned with the RayServe CRD Established and in discovery; the Env keeps 8 planes ready ahead (Prewarm), so some calls take a ready plane and the others wait for one to be created.",
		"plane_with_crds_created_*: the same with nothing ready ahead (KPLANE_PREWARM=-1): every call creates its plane.",
		"kplane_parallel_plane_*: the same time inside the suite, 50+ cases taking planes at once on the same cores.",
		"envtest_suite_seconds includes envtest's start-up (etcd, kube-apiserver, CRD install); envtest_namespace_* is its per-case setup (a namespace on the shared cluster).",
		"*_process_seconds: the whole test binary, including TestMain's kplane server start (the envtest run starts one too).",
		"envtest has no garbage collector: its delete cases check owner references only.",
		"*_cpu_seconds: user and system CPU of the whole run of the test binary (its TestMain's server start included), split between the test binary and the servers it started (sampled every 100 ms). speedup_bound_by_test_binary_cpu: envtest_suite_seconds over the test binary's own CPU time spread on every core of the machine: the largest speedup the parallel suite can reach here even with a server that costs nothing.",
	}
	for _, r := range []struct {
		name string
		run  suiteRun
	}{{"kplane parallel", parallel}, {"kplane serial", serial}, {"envtest", envtest}} {
		if len(r.run.failures) > 0 {
			notes = append(notes, fmt.Sprintf("%s: failed %v", r.name, r.run.failures))
		}
	}
	return Result{
		Scenario: "gotest",
		Params:   map[string]any{"example": p.Example, "planes": p.Planes, "parallel": p.Parallel},
		Figures:  f,
		Notes:    notes,
	}
}

// addInstalledPath adds the figures of the old path, measured in the same
// run: every plane installs the CRDs itself (KPLANE_CRD_TEMPLATE=off).
func addInstalledPath(r *Result, created, parallel suiteRun) {
	f := r.Figures
	f["plane_with_crds_installed_ms_p50"] = secondsPercentile(created.timings.Setup, 0.50)
	f["plane_with_crds_installed_ms_p90"] = secondsPercentile(created.timings.Setup, 0.90)
	f["plane_with_crds_installed_ms_p99"] = secondsPercentile(created.timings.Setup, 0.99)
	f["kplane_installed_parallel_plane_ms_p50"] = secondsPercentile(parallel.timings.Setup, 0.50)
	f["kplane_installed_parallel_plane_ms_p99"] = secondsPercentile(parallel.timings.Setup, 0.99)
	f["kplane_installed_parallel_suite_seconds"] = parallel.timings.Suite
	f["kplane_installed_suite_cases_passed"] = float64(parallel.passed)
	f["speedup_installed_parallel_kplane_vs_serial_envtest"] = f["envtest_suite_seconds"] / parallel.timings.Suite
	r.Notes = append(r.Notes,
		"*installed*: the old path in the same run (KPLANE_CRD_TEMPLATE=off, no plane ready ahead for plane_with_crds_installed_*): every plane creates the CRDs and waits until they are Established and in discovery.")
	if len(parallel.failures) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("kplane parallel, CRDs installed per plane: failed %v", parallel.failures))
	}
}

// addAPIOnly adds the parallel suite run with every plane API-only
// (RAYSERVE_SIMULATION=off), as envtest's cluster is.
func addAPIOnly(r *Result, run suiteRun) {
	f := r.Figures
	f["kplane_api_only_parallel_suite_seconds"] = run.timings.Suite
	f["kplane_api_only_suite_cases_passed"] = float64(run.passed)
	f["kplane_api_only_parallel_server_cpu_seconds"] = run.childCPU["kplane"]
	f["kplane_api_only_parallel_test_binary_cpu_seconds"] = run.testCPU
	f["speedup_api_only_parallel_kplane_vs_serial_envtest"] = f["envtest_suite_seconds"] / run.timings.Suite
	r.Notes = append(r.Notes,
		"*api_only*: the parallel suite again with every plane made WithoutSimulation (RAYSERVE_SIMULATION=off): nothing moves the operator's Deployments, as on envtest; the server still collects garbage, which envtest does not.")
	if len(run.failures) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("kplane parallel, API-only planes: failed %v", run.failures))
	}
}

// failureLines are the lines of the verbose output that tell why a test
// failed (file:line messages and FAIL lines), at most 40 of them.
func failureLines(out string) string {
	var lines []string
	for line := range strings.Lines(out) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--- FAIL") || strings.Contains(trimmed, "_test.go:") || strings.HasPrefix(trimmed, "panic:") {
			lines = append(lines, trimmed)
		}
	}
	return strings.Join(lines[:min(len(lines), 40)], "\n")
}
