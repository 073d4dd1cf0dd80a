package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sideBySideScenarios are the scenarios that compare kplane with one
// upstream kube-apiserver per plane, and that `make bench` runs.
var sideBySideScenarios = []string{"curve", "requests", "watch", "baseline"}

// sideBySideOptions are the knobs of those scenarios.
type sideBySideOptions struct {
	Quick      bool
	ReportOnly bool

	// Steps are the plane counts of the density curve, capped by Max.
	Steps      string
	Max        int
	Datastores string

	RequestPlanes int
	RequestOps    int

	Watchers         string
	WatchersPerPlane int
	WatchWrites      int

	BaselineInstances int
	KubeAPIServer     string
	Etcd              string
	CacheDir          string
	// BuildBaseline builds kube-apiserver and etcd when they are not in
	// CacheDir; quick runs skip the baseline instead.
	BuildBaseline bool
}

func (o *sideBySideOptions) register(fs *flag.FlagSet) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	fs.BoolVar(&o.Quick, "quick", false, "tiny counts (a smoke test of the harness in about a minute); skips the baseline unless its binaries are already built")
	fs.BoolVar(&o.ReportOnly, "report-only", false, "rewrite the Markdown table and plots from the --out JSON without measuring")
	fs.StringVar(&o.Steps, "steps", "0,100,1000,5000,10000", "plane counts at which the curve scenario measures memory")
	fs.IntVar(&o.Max, "max", 10000, "cap on the planes of the curve scenario")
	fs.StringVar(&o.Datastores, "datastores", "sqlite,etcd", "datastores of the curve scenario (sqlite, etcd = embedded etcd)")
	fs.IntVar(&o.RequestPlanes, "request-planes", 1000, "planes the requests scenario spreads its load over")
	fs.IntVar(&o.RequestOps, "request-ops", 5000, "requests per verb in each half of the requests scenario")
	fs.StringVar(&o.Watchers, "watchers", "1000,10000", "watcher counts of the watch scenario")
	fs.IntVar(&o.WatchersPerPlane, "watchers-per-plane", 10, "watchers on each plane in the watch scenario")
	fs.IntVar(&o.WatchWrites, "watch-writes", 3, "writes into each plane in the watch scenario")
	fs.IntVar(&o.BaselineInstances, "baseline-instances", 3, "kube-apiservers the baseline scenario runs on one etcd")
	fs.StringVar(&o.KubeAPIServer, "kube-apiserver", "", "kube-apiserver binary of the baseline (default: built from k8s.io/kubernetes in go.mod, cached in --cache-dir)")
	fs.StringVar(&o.Etcd, "etcd", "", "etcd binary of the baseline (default: built from test/e2e/etcdserver, cached in --cache-dir)")
	fs.StringVar(&o.CacheDir, "cache-dir", filepath.Join(cache, "kplane-bench"), "where the baseline binaries are cached")
	o.BuildBaseline = true
}

// applyQuick shrinks every count so that all scenarios together take
// about a minute on two busy cores.
func (o *sideBySideOptions) applyQuick() {
	o.Steps, o.Max = "0,10,20", 20
	o.RequestPlanes, o.RequestOps = 5, 60
	o.Watchers, o.WatchersPerPlane, o.WatchWrites = "20", 5, 2
	o.BaselineInstances = 1
	o.BuildBaseline = false
}

// run runs one of the side-by-side scenarios.
func (o *sideBySideOptions) run(scenario, binary string, workers, configmaps int, bootstrap string) ([]Result, error) {
	switch scenario {
	case "curve":
		steps, err := ints(o.Steps)
		if err != nil {
			return nil, fmt.Errorf("--steps: %w", err)
		}
		var results []Result
		for _, ds := range strings.Split(o.Datastores, ",") {
			r, err := densityCurve(binary, curveParams{Steps: steps, Max: o.Max, Workers: workers, ConfigMaps: configmaps,
				Datastore: ds, Bootstrap: bootstrap})
			if err != nil {
				return nil, fmt.Errorf("curve on %s: %w", ds, err)
			}
			results = append(results, r)
		}
		return results, nil
	case "requests":
		r, err := requestOverhead(binary, requestParams{Planes: o.RequestPlanes, Ops: o.RequestOps, Workers: workers, Bootstrap: bootstrap})
		return []Result{r}, err
	case "watch":
		counts, err := ints(o.Watchers)
		if err != nil {
			return nil, fmt.Errorf("--watchers: %w", err)
		}
		r, err := watchFanOut(binary, watchParams{Watchers: counts, PerPlane: o.WatchersPerPlane, Writes: o.WatchWrites,
			Workers: workers, Bootstrap: bootstrap})
		return []Result{r}, err
	case "baseline":
		r, err := baseline(baselineParams{Instances: o.BaselineInstances, KubeAPIServer: o.KubeAPIServer, Etcd: o.Etcd,
			CacheDir: o.CacheDir, Build: o.BuildBaseline})
		return []Result{r}, err
	}
	return nil, fmt.Errorf("unknown scenario %q", scenario)
}

func ints(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a count", f)
		}
		out = append(out, n)
	}
	return out, nil
}
