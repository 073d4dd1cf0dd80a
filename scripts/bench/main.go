// Command bench measures kplane on this machine and writes the figures to a
// JSON file, with a Markdown table and PNG plots beside it. Each scenario
// starts its own server (the binary under test) on loopback with a
// temporary data directory and stops it afterwards; the baseline scenario
// runs upstream kube-apiservers on one etcd the same way.
//
//	go run ./scripts/bench --binary bin/kplane --planes 1000 --out bench/density.json
//	make bench    # every scenario side by side, bench/results.{json,md} and bench/*.png
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Result is one scenario's figures.
type Result struct {
	Scenario string             `json:"scenario"`
	Params   map[string]any     `json:"params"`
	Figures  map[string]float64 `json:"figures"`
	Notes    []string           `json:"notes,omitempty"`
}

// Report is what the JSON file holds.
type Report struct {
	Date    string   `json:"date"`
	Machine Machine  `json:"machine"`
	Binary  string   `json:"binary"`
	Command string   `json:"command,omitempty"`
	Results []Result `json:"results"`
}

// Machine describes where the figures were taken.
type Machine struct {
	CPUs     int    `json:"cpus"`
	MemoryGB int    `json:"memoryGiB"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

// benchFlags are the command line's settings of every scenario.
type benchFlags struct {
	binary          *string
	planes          *int
	workers         *int
	configmaps      *int
	datastore       *string
	scenarios       *string
	cycles          *int
	fleetReplicas   *int
	bootstrap       *string
	snapshotObjects *int
	busyPlanes      *int
	busyRate        *int
	snapshotCalls   *int
	streams         *int
	streamUsers     *int
	streamObjects   *int
	out             *string
	churnSettle     *time.Duration
	crdCycles       *int
	oldBinary       *string
	gotestExample   *string
	gotestPlanes    *int
	gotestParallel  *int
	containerPlanes *int
	plainPlaneCount *int
	podMemoryPlanes *int
	podMemoryPods   *int
	plainBaseOnly   *bool
	scenarioObjects *int
	scaleoutOps     *int
	scenarioMembers *int
	quotaCreates    *int
	quotaDeletes    *int
	policyCreates   *int
	policyPlanes    *int
	webhookCreates  *int
	webhookPlanes   *int
	serviceCreates  *int
	profilesStored  *string
	profilesIdle    *time.Duration
	restartPlanes   *int
	auditOps        *int
	auditRounds     *int
	rounds          *int
	noisyWriters    *int
	noisyListers    *int
	noisyOps        *int
	profileDir      *string
	noisySeats      intList
	side            sideBySideOptions
}

// parseFlags reads the command line.
func parseFlags() *benchFlags {
	f := &benchFlags{}
	f.binary = flag.String("binary", "bin/kplane", "kplane binary to measure")
	f.planes = flag.Int("planes", 1000, "planes to create in the density scenario")
	f.workers = flag.Int("workers", 8, "concurrent clients creating planes")
	f.configmaps = flag.Int("configmaps", 3, "configmaps written into each plane")
	f.datastore = flag.String("datastore", "", "datastore endpoint (\"\" = SQLite, \"etcd\" = embedded etcd)")
	f.scenarios = flag.String("scenarios", "density", "comma-separated scenarios: density, lifecycle, controllers, workloads, member-workloads, pod-memory, crds, crd-churn, fleet, snapshot, streams, gotest, container, scenarios, plain-planes, quota, policies, webhooks, profiles, restart, audit, noisy-neighbor, services, scaleout, "+strings.Join(sideBySideScenarios, ", "))
	f.cycles = flag.Int("cycles", 3, "create/delete rounds of the lifecycle scenario (3 or more for the leak check)")
	f.fleetReplicas = flag.Int("fleet-replicas", 1000, "members of the Fleet in the fleet scenario")
	f.bootstrap = flag.String("plane-bootstrap", "minimal", "the server's --plane-bootstrap (minimal or full)")
	f.snapshotObjects = flag.Int("snapshot-objects", 1000, "objects (10 kinds) in the plane of the snapshot scenario")
	f.busyPlanes = flag.Int("busy-planes", 100, "other planes written to during the snapshot scenario")
	f.busyRate = flag.Int("busy-rate", 100, "writes per second to the busy planes (all together) during the snapshot scenario")
	f.snapshotCalls = flag.Int("snapshot-calls", 1000, "snapshots measured in the snapshot scenario")
	f.streams = flag.Int("streams", 200, "snapshot delta streams opened on one plane in the streams scenario")
	f.streamUsers = flag.Int("stream-users", 4, "identities the streams are spread over (each at its per-identity limit)")
	f.streamObjects = flag.Int("stream-objects", 100, "objects (10 kinds) in the plane of the streams scenario")
	f.out = flag.String("out", "bench/density.json", "JSON file to write; the Markdown table and the plots go beside it")
	f.churnSettle = flag.Duration("crd-churn-settle", 80*time.Second, "idle time before the crd-churn scenario's second reading (the watch caches keep 75 s of events)")
	f.crdCycles = flag.Int("crd-cycles", 1000, "CRD create/delete cycles of the crd-churn scenario")
	f.oldBinary = flag.String("old-binary", "", "an earlier kplane binary, measured side by side by the scenarios that compare (crd-churn, services, workloads: its rollout, container: the bare binary, profiles: its empty server, restart: its restarts, pod-memory: its memory per Pod, scenarios: its resets, plain-planes: its base planes)")
	f.gotestExample = flag.String("gotest-example", "examples/rayserve-operator", "operator module whose test suite the gotest scenario runs")
	f.gotestPlanes = flag.Int("gotest-planes", 100, "planes the gotest scenario creates one after another to time a new plane with CRDs")
	f.gotestParallel = flag.Int("gotest-parallel", 64, "-test.parallel of the gotest scenario's suite on kplane")
	f.containerPlanes = flag.Int("container-planes", 50, "planes created in the container scenario (bare and in the container) before memory is read")
	f.plainPlaneCount = flag.Int("plain-planes", 1000, "planes made from nothing in the plain-planes scenario (each mode)")
	f.podMemoryPlanes = flag.Int("pod-memory-planes", 100, "planes of the pod-memory scenario")
	f.podMemoryPods = flag.Int("pod-memory-pods", 30, "Pods per plane measured in the pod-memory scenario (after a first one that brings the nodes)")
	f.plainBaseOnly = flag.Bool("plain-base-only", false, "measure only the base plane's server in the plain-planes scenario")
	f.scenarioObjects = flag.Int("scenario-objects", 500, "objects in the template of the scenarios scenario")
	f.scenarioMembers = flag.Int("scenario-members", 1000, "members of the Fleet made from the template in the scenarios scenario")
	f.quotaCreates = flag.Int("quota-creates", 500, "ConfigMaps created in each plane of the quota scenario")
	f.quotaDeletes = flag.Int("quota-deletes", 50, "deletes whose status.used update the quota scenario times")
	f.policyCreates = flag.Int("policy-creates", 500, "ConfigMaps created in each plane of the policies scenario")
	f.policyPlanes = flag.Int("policy-planes", 1000, "planes holding one ValidatingAdmissionPolicy each in the policies scenario")
	f.webhookCreates = flag.Int("webhook-creates", 300, "ConfigMaps created in each plane of the webhooks scenario's latency phase")
	f.webhookPlanes = flag.Int("webhook-planes", 1000, "planes with (and as many without) a webhook in the webhooks scenario's memory phase")
	f.scaleoutOps = flag.Int("scaleout-ops", 2000, "requests of each verb per server count in the scaleout scenario")
	f.serviceCreates = flag.Int("service-creates", 300, "Services of each type (and ConfigMaps) created one at a time in the services scenario")
	f.profilesStored = flag.String("profiles-stored", "1000,10000", "plane counts the profiles scenario restarts with (ascending, comma-separated)")
	f.restartPlanes = flag.Int("restart-planes", 10000, "planes stored before the restarts of the restart scenario (0: an empty server)")
	f.profilesIdle = flag.Duration("profiles-idle", 150*time.Second, "how long after /readyz the profiles scenario reads the empty server's memory a second time, as it stays idle (past Go's forced GC two minutes after ready, which pages in type data)")
	f.auditOps = flag.Int("audit-ops", 1000, "requests of each verb per configuration and round in the audit scenario")
	f.auditRounds = flag.Int("audit-rounds", 5, "interleaved rounds of the audit scenario (the median counts)")
	f.rounds = flag.Int("rounds", 1, "with --old-binary, rounds of plain-planes (base planes), workloads (rollout), pod-memory, restart and scenarios (its Fleet alone) in which the two binaries take turns going first; of profiles, with or without it, rounds in which every server is measured once; each figure is the median of its rounds")
	f.noisyWriters = flag.Int("noisy-writers", 64, "plane A's concurrent create loops in the noisy-neighbor scenario")
	f.noisyListers = flag.Int("noisy-listers", 64, "plane A's concurrent LIST loops in the noisy-neighbor scenario")
	f.noisyOps = flag.Int("noisy-ops", 300, "GETs and LISTs plane B makes alone and under the flood in the noisy-neighbor scenario")
	flag.Var(&f.noisySeats, "noisy-seats", "further --plane-fairness-seats the noisy-neighbor scenario measures (comma-separated)")
	f.profileDir = flag.String("profile-dir", "", "write profiles of the server into this directory: its heap after each scenario, its CPU during the timed part of fleet, plain-planes, workloads and scenarios")
	f.side.register(flag.CommandLine)
	flag.Parse()
	return f
}

// quick shrinks every scenario to a smoke run (--quick).
func (f *benchFlags) quick() {
	f.side.applyQuick()
	*f.planes, *f.cycles, *f.fleetReplicas, *f.crdCycles = min(*f.planes, 20), min(*f.cycles, 1), min(*f.fleetReplicas, 10), min(*f.crdCycles, 20)
	*f.churnSettle = min(*f.churnSettle, time.Second)
	*f.snapshotObjects, *f.busyPlanes, *f.busyRate, *f.snapshotCalls = min(*f.snapshotObjects, 50), min(*f.busyPlanes, 3), min(*f.busyRate, 20), min(*f.snapshotCalls, 20)
	*f.streams, *f.streamObjects = min(*f.streams, 20), min(*f.streamObjects, 20)
	*f.quotaCreates, *f.quotaDeletes = min(*f.quotaCreates, 50), min(*f.quotaDeletes, 10)
	*f.policyCreates, *f.policyPlanes = min(*f.policyCreates, 50), min(*f.policyPlanes, 20)
	*f.webhookCreates, *f.webhookPlanes = min(*f.webhookCreates, 50), min(*f.webhookPlanes, 50)
	*f.serviceCreates = min(*f.serviceCreates, 20)
	*f.profilesStored = "20,50"
	*f.restartPlanes = min(*f.restartPlanes, 20)
	*f.profilesIdle = min(*f.profilesIdle, 10*time.Second)
	*f.auditOps, *f.auditRounds = min(*f.auditOps, 100), min(*f.auditRounds, 1)
	*f.noisyWriters, *f.noisyListers, *f.noisyOps = min(*f.noisyWriters, 8), min(*f.noisyListers, 8), min(*f.noisyOps, 30)
}

// runScenario runs one scenario with f's settings.
func runScenario(scenario, bin string, f *benchFlags) ([]Result, error) {
	var res Result
	var err error
	switch scenario {
	case "density":
		res, err = density(bin, densityParams{Planes: *f.planes, Workers: *f.workers, ConfigMaps: *f.configmaps, Datastore: *f.datastore, Bootstrap: *f.bootstrap})
	case "lifecycle":
		res, err = lifecycle(bin, lifecycleParams{Planes: *f.planes, Workers: *f.workers, Bootstrap: *f.bootstrap, Cycles: *f.cycles, ProfileDir: *f.profileDir})
	case "controllers":
		res, err = controllersScenario(bin, densityParams{Planes: *f.planes, Workers: *f.workers, ConfigMaps: *f.configmaps, Bootstrap: *f.bootstrap, ProfileDir: *f.profileDir})
	case "fleet":
		res, err = fleetScenario(bin, fleetParams{Replicas: *f.fleetReplicas, Bootstrap: *f.bootstrap, ProfileDir: *f.profileDir})
	case "crds":
		res, err = crdDensity(bin, crdParams{Planes: *f.planes, Workers: *f.workers, CRDs: 3, CRsPerCRD: 10, SchemaSize: 50 << 10, ProfileDir: *f.profileDir})
	case "crd-churn":
		res, err = crdChurn(bin, crdChurnParams{Cycles: *f.crdCycles, Old: *f.oldBinary, ProfileDir: *f.profileDir, Settle: *f.churnSettle})
	case "snapshot":
		res, err = snapshotScenario(bin, snapshotParams{Objects: *f.snapshotObjects, BusyPlanes: *f.busyPlanes, BusyRate: *f.busyRate, Calls: *f.snapshotCalls})
	case "gotest":
		res, err = gotestScenario(bin, gotestParams{Example: *f.gotestExample, Planes: *f.gotestPlanes, Parallel: *f.gotestParallel,
			Baseline: baselineParams{KubeAPIServer: f.side.KubeAPIServer, Etcd: f.side.Etcd, CacheDir: f.side.CacheDir, Build: true}})
	case "container":
		res, err = containerScenario(bin, containerParams{Planes: *f.containerPlanes, OldBinary: *f.oldBinary})
	case "scenarios":
		res, err = scenariosScenario(bin, scenariosParams{Objects: *f.scenarioObjects, Members: *f.scenarioMembers,
			CopyMembers: 10, Changes: 20, Resets: 50, Old: *f.oldBinary, Rounds: *f.rounds, ProfileDir: *f.profileDir})
	case "workloads":
		res, err = workloadsScenario(bin, workloadsParams{Planes: *f.planes, Workers: *f.workers, Bootstrap: *f.bootstrap, ProfileDir: *f.profileDir, Old: *f.oldBinary, Rounds: *f.rounds})
	case "member-workloads":
		res, err = memberWorkloadsScenario(bin, memberWorkloadsParams{Members: *f.fleetReplicas, Workers: *f.workers, Bootstrap: *f.bootstrap})
	case "plain-planes":
		res, err = plainPlanesScenario(bin, plainPlanesParams{Planes: *f.plainPlaneCount, Workers: *f.workers, BaseOnly: *f.plainBaseOnly, Old: *f.oldBinary, Rounds: *f.rounds, ProfileDir: *f.profileDir})
	case "pod-memory":
		res, err = podMemoryScenario(bin, podMemoryParams{Planes: *f.podMemoryPlanes, Pods: *f.podMemoryPods, Workers: *f.workers, ProfileDir: *f.profileDir, Old: *f.oldBinary, Rounds: *f.rounds})
	case "quota":
		res, err = quotaScenario(bin, quotaParams{Creates: *f.quotaCreates, Deletes: *f.quotaDeletes})
	case "policies":
		res, err = policiesScenario(bin, policiesParams{Creates: *f.policyCreates, Held: *f.policyPlanes, Workers: *f.workers})
	case "webhooks":
		res, err = webhooksScenario(bin, webhooksParams{Creates: *f.webhookCreates, Planes: *f.webhookPlanes, Workers: 8,
			SlowCalls: 50, SlowFor: 10 * time.Second, OtherCalls: 200})
	case "profiles":
		var stored []int
		if stored, err = parseCounts(*f.profilesStored); err == nil {
			res, err = profilesScenario(bin, profilesParams{Stored: stored, Workers: *f.workers, Old: *f.oldBinary, Idle: *f.profilesIdle, Rounds: *f.rounds})
		}
	case "restart":
		res, err = restartScenario(bin, restartParams{Planes: *f.restartPlanes, Workers: *f.workers, Old: *f.oldBinary, Rounds: *f.rounds})
	case "audit":
		res, err = auditScenario(bin, auditParams{Ops: *f.auditOps, Workers: *f.workers, Rounds: *f.auditRounds, FullPlanes: 5, BufferEvents: 1000})
	case "noisy-neighbor":
		res, err = noisyNeighborScenario(bin, noisyParams{Writers: *f.noisyWriters, Listers: *f.noisyListers, Ops: *f.noisyOps, Objects: 100, Seats: f.noisySeats})
	case "services":
		res, err = servicesScenario(bin, servicesParams{Creates: *f.serviceCreates, Old: *f.oldBinary})
	case "scaleout":
		res, err = scaleoutScenario(bin, scaleoutParams{Servers: []int{1, 2, 3}, Ops: *f.scaleoutOps, Workers: *f.workers,
			Etcd: f.side.Etcd, CacheDir: f.side.CacheDir})
	case "streams":
		res, err = streamsScenario(bin, streamsParams{Streams: *f.streams, Users: *f.streamUsers, Objects: *f.streamObjects, ProfileDir: *f.profileDir})
	default:
		return f.side.run(scenario, bin, *f.workers, *f.configmaps, *f.bootstrap)
	}
	if err != nil {
		return nil, err
	}
	return []Result{res}, nil
}

func main() {
	if orders := os.Getenv(floodEnv); orders != "" {
		runFloodChild(orders)
		return
	}
	f := parseFlags()

	bin, err := filepath.Abs(*f.binary)
	if err != nil {
		fail(err)
	}
	stop := cleanupOnSignal()
	defer stop()
	exit := func(err error) { stop(); fail(err) }
	if f.side.Quick {
		f.quick()
	}
	if f.side.ReportOnly {
		if err := rewriteReport(*f.out); err != nil {
			exit(err)
		}
		return
	}
	report := Report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: Machine{CPUs: runtime.NumCPU(), MemoryGB: memoryGiB(), OS: runtime.GOOS, Arch: runtime.GOARCH},
		Binary:  *f.binary,
		Command: reproduceCommand(os.Args[1:]),
	}
	for _, scenario := range strings.Split(*f.scenarios, ",") {
		results, err := runScenario(scenario, bin, f)
		if err != nil {
			// Keep what the scenarios before this one measured.
			if len(report.Results) > 0 {
				_ = writeReport(*f.out, report)
			}
			exit(fmt.Errorf("%s: %w", scenario, err))
		}
		for _, r := range results {
			report.Results = append(report.Results, r)
			printResult(r)
		}
	}
	if err := writeReport(*f.out, report); err != nil {
		exit(err)
	}
}

// parseCounts reads a comma-separated list of ascending positive counts.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || (len(out) > 0 && n <= out[len(out)-1]) {
			return nil, fmt.Errorf("%q: want ascending positive counts such as 1000,10000", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func printResult(r Result) {
	fmt.Printf("== %s %v\n", r.Scenario, r.Params)
	names := make([]string, 0, len(r.Figures))
	for k := range r.Figures {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Printf("   %-36s %12.3f\n", k, r.Figures[k])
	}
	for _, n := range r.Notes {
		fmt.Println("   note:", n)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// reproduceCommand is the command that reruns this benchmark from the
// repository, for the report: os.Args[0] is a path in the build cache
// under `go run`, private to this machine.
func reproduceCommand(args []string) string {
	return strings.Join(append([]string{"go", "run", "./scripts/bench"}, args...), " ")
}
