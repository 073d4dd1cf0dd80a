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

func main() {
	binary := flag.String("binary", "bin/kplane", "kplane binary to measure")
	planes := flag.Int("planes", 1000, "planes to create in the density scenario")
	workers := flag.Int("workers", 8, "concurrent clients creating planes")
	configmaps := flag.Int("configmaps", 3, "configmaps written into each plane")
	datastore := flag.String("datastore", "", "datastore endpoint (\"\" = SQLite, \"etcd\" = embedded etcd)")
	scenarios := flag.String("scenarios", "density", "comma-separated scenarios: density, lifecycle, controllers, workloads, crds, crd-churn, fleet, snapshot, streams, gotest, container, scenarios, plain-planes, quota, policies, webhooks, services, "+strings.Join(sideBySideScenarios, ", "))
	cycles := flag.Int("cycles", 3, "create/delete rounds of the lifecycle scenario (3 or more for the leak check)")
	fleetReplicas := flag.Int("fleet-replicas", 1000, "members of the Fleet in the fleet scenario")
	bootstrap := flag.String("plane-bootstrap", "minimal", "the server's --plane-bootstrap (minimal or full)")
	snapshotObjects := flag.Int("snapshot-objects", 1000, "objects (10 kinds) in the plane of the snapshot scenario")
	busyPlanes := flag.Int("busy-planes", 100, "other planes written to during the snapshot scenario")
	busyRate := flag.Int("busy-rate", 100, "writes per second to the busy planes (all together) during the snapshot scenario")
	snapshotCalls := flag.Int("snapshot-calls", 1000, "snapshots measured in the snapshot scenario")
	streams := flag.Int("streams", 200, "snapshot delta streams opened on one plane in the streams scenario")
	streamUsers := flag.Int("stream-users", 4, "identities the streams are spread over (each at its per-identity limit)")
	streamObjects := flag.Int("stream-objects", 100, "objects (10 kinds) in the plane of the streams scenario")
	out := flag.String("out", "bench/density.json", "JSON file to write; the Markdown table and the plots go beside it")
	churnSettle := flag.Duration("crd-churn-settle", 80*time.Second, "idle time before the crd-churn scenario's second reading (the watch caches keep 75 s of events)")
	crdCycles := flag.Int("crd-cycles", 1000, "CRD create/delete cycles of the crd-churn scenario")
	oldBinary := flag.String("old-binary", "", "an earlier kplane binary, measured side by side by the scenarios that compare (crd-churn, services, container: the bare binary)")
	gotestExample := flag.String("gotest-example", "examples/rayserve-operator", "operator module whose test suite the gotest scenario runs")
	gotestPlanes := flag.Int("gotest-planes", 100, "planes the gotest scenario creates one after another to time a new plane with CRDs")
	gotestParallel := flag.Int("gotest-parallel", 64, "-test.parallel of the gotest scenario's suite on kplane")
	containerPlanes := flag.Int("container-planes", 50, "planes created in the container scenario (bare and in the container) before memory is read")
	plainPlaneCount := flag.Int("plain-planes", 1000, "planes made from nothing in the plain-planes scenario (each mode)")
	plainBaseOnly := flag.Bool("plain-base-only", false, "measure only the base plane's server in the plain-planes scenario")
	scenarioObjects := flag.Int("scenario-objects", 500, "objects in the template of the scenarios scenario")
	scenarioMembers := flag.Int("scenario-members", 1000, "members of the Fleet made from the template in the scenarios scenario")
	quotaCreates := flag.Int("quota-creates", 500, "ConfigMaps created in each plane of the quota scenario")
	quotaDeletes := flag.Int("quota-deletes", 50, "deletes whose status.used update the quota scenario times")
	policyCreates := flag.Int("policy-creates", 500, "ConfigMaps created in each plane of the policies scenario")
	policyPlanes := flag.Int("policy-planes", 1000, "planes holding one ValidatingAdmissionPolicy each in the policies scenario")
	webhookCreates := flag.Int("webhook-creates", 300, "ConfigMaps created in each plane of the webhooks scenario's latency phase")
	webhookPlanes := flag.Int("webhook-planes", 1000, "planes with (and as many without) a webhook in the webhooks scenario's memory phase")
	serviceCreatesN := flag.Int("service-creates", 300, "Services of each type (and ConfigMaps) created one at a time in the services scenario")
	profileDir := flag.String("profile-dir", "", "write a heap profile of the server after each scenario into this directory")
	var side sideBySideOptions
	side.register(flag.CommandLine)
	flag.Parse()

	bin, err := filepath.Abs(*binary)
	if err != nil {
		fail(err)
	}
	stop := cleanupOnSignal()
	defer stop()
	exit := func(err error) { stop(); fail(err) }
	if side.Quick {
		side.applyQuick()
		*planes, *cycles, *fleetReplicas, *crdCycles = min(*planes, 20), min(*cycles, 1), min(*fleetReplicas, 10), min(*crdCycles, 20)
		*churnSettle = min(*churnSettle, time.Second)
		*snapshotObjects, *busyPlanes, *busyRate, *snapshotCalls = min(*snapshotObjects, 50), min(*busyPlanes, 3), min(*busyRate, 20), min(*snapshotCalls, 20)
		*streams, *streamObjects = min(*streams, 20), min(*streamObjects, 20)
		*quotaCreates, *quotaDeletes = min(*quotaCreates, 50), min(*quotaDeletes, 10)
		*policyCreates, *policyPlanes = min(*policyCreates, 50), min(*policyPlanes, 20)
		*webhookCreates, *webhookPlanes = min(*webhookCreates, 50), min(*webhookPlanes, 50)
		*serviceCreatesN = min(*serviceCreatesN, 20)
	}
	if side.ReportOnly {
		if err := rewriteReport(*out); err != nil {
			exit(err)
		}
		return
	}
	report := Report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: Machine{CPUs: runtime.NumCPU(), MemoryGB: memoryGiB(), OS: runtime.GOOS, Arch: runtime.GOARCH},
		Binary:  *binary,
		Command: reproduceCommand(os.Args[1:]),
	}
	for _, scenario := range strings.Split(*scenarios, ",") {
		var res Result
		var results []Result
		var err error
		switch scenario {
		case "density":
			res, err = density(bin, densityParams{Planes: *planes, Workers: *workers, ConfigMaps: *configmaps, Datastore: *datastore, Bootstrap: *bootstrap})
		case "lifecycle":
			res, err = lifecycle(bin, lifecycleParams{Planes: *planes, Workers: *workers, Bootstrap: *bootstrap, Cycles: *cycles, ProfileDir: *profileDir})
		case "controllers":
			res, err = controllersScenario(bin, densityParams{Planes: *planes, Workers: *workers, ConfigMaps: *configmaps, Bootstrap: *bootstrap, ProfileDir: *profileDir})
		case "fleet":
			res, err = fleetScenario(bin, fleetParams{Replicas: *fleetReplicas, Bootstrap: *bootstrap, ProfileDir: *profileDir})
		case "crds":
			res, err = crdDensity(bin, crdParams{Planes: *planes, Workers: *workers, CRDs: 3, CRsPerCRD: 10, SchemaSize: 50 << 10, ProfileDir: *profileDir})
		case "crd-churn":
			res, err = crdChurn(bin, crdChurnParams{Cycles: *crdCycles, Old: *oldBinary, ProfileDir: *profileDir, Settle: *churnSettle})
		case "snapshot":
			res, err = snapshotScenario(bin, snapshotParams{Objects: *snapshotObjects, BusyPlanes: *busyPlanes, BusyRate: *busyRate, Calls: *snapshotCalls})
		case "gotest":
			res, err = gotestScenario(bin, gotestParams{Example: *gotestExample, Planes: *gotestPlanes, Parallel: *gotestParallel,
				Baseline: baselineParams{KubeAPIServer: side.KubeAPIServer, Etcd: side.Etcd, CacheDir: side.CacheDir, Build: true}})
		case "container":
			res, err = containerScenario(bin, containerParams{Planes: *containerPlanes, OldBinary: *oldBinary})
		case "scenarios":
			res, err = scenariosScenario(bin, scenariosParams{Objects: *scenarioObjects, Members: *scenarioMembers,
				CopyMembers: 10, Changes: 20, Resets: 50})
		case "workloads":
			res, err = workloadsScenario(bin, workloadsParams{Planes: *planes, Workers: *workers, Bootstrap: *bootstrap, ProfileDir: *profileDir})
		case "plain-planes":
			res, err = plainPlanesScenario(bin, plainPlanesParams{Planes: *plainPlaneCount, Workers: *workers, BaseOnly: *plainBaseOnly})
		case "quota":
			res, err = quotaScenario(bin, quotaParams{Creates: *quotaCreates, Deletes: *quotaDeletes})
		case "policies":
			res, err = policiesScenario(bin, policiesParams{Creates: *policyCreates, Held: *policyPlanes, Workers: *workers})
		case "webhooks":
			res, err = webhooksScenario(bin, webhooksParams{Creates: *webhookCreates, Planes: *webhookPlanes, Workers: 8,
				SlowCalls: 50, SlowFor: 10 * time.Second, OtherCalls: 200})
		case "services":
			res, err = servicesScenario(bin, servicesParams{Creates: *serviceCreatesN, Old: *oldBinary})
		case "streams":
			res, err = streamsScenario(bin, streamsParams{Streams: *streams, Users: *streamUsers, Objects: *streamObjects, ProfileDir: *profileDir})
		default:
			results, err = side.run(scenario, bin, *workers, *configmaps, *bootstrap)
		}
		if err != nil {
			// Keep what the scenarios before this one measured.
			if len(report.Results) > 0 {
				_ = writeReport(*out, report)
			}
			exit(fmt.Errorf("%s: %w", scenario, err))
		}
		if results == nil {
			results = []Result{res}
		}
		for _, r := range results {
			report.Results = append(report.Results, r)
			printResult(r)
		}
	}
	if err := writeReport(*out, report); err != nil {
		exit(err)
	}
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
