package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// config is the runner's command line.
type config struct {
	e2eBinary   string
	kubeconfig  string
	outDir      string
	focus       string
	skip        string
	specTimeout time.Duration
	// slow runs the [Slow] specs too, each with slowTimeout.
	slow          bool
	slowTimeout   time.Duration
	parallel      int
	allowFailures bool
	extraArgs     []string
}

// e2eArgs are the flags every e2e.test process gets. A plane has no nodes:
// -1 allowed-not-ready nodes makes the suite's set-up skip waiting for nodes
// and DaemonSets, and --num-nodes=0 stops it from requiring a schedulable
// node; skeleton is the provider without a cloud.
func (c config) e2eArgs() []string {
	args := []string{
		"--kubeconfig=" + c.kubeconfig,
		"--provider=skeleton",
		"--allowed-not-ready-nodes=-1",
		"--num-nodes=0",
		"--e2e-output-dir=" + c.outDir,
		"--ginkgo.no-color",
	}
	return append(args, c.extraArgs...)
}

func main() {
	cfg := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func parseFlags() config {
	var cfg config
	var extra string
	flag.StringVar(&cfg.e2eBinary, "e2e", "bin/conformance/e2e.test", "the upstream e2e.test binary")
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig of the plane under test")
	flag.StringVar(&cfg.outDir, "out", "bin/conformance/results", "directory for logs, reports and the results table")
	flag.StringVar(&cfg.focus, "focus", `\[sig-api-machinery\].*\[Conformance\]`, "regular expression selecting the specs")
	flag.StringVar(&cfg.skip, "skip", "", "regular expression of further specs to skip (on top of the built-in skips)")
	flag.DurationVar(&cfg.specTimeout, "spec-timeout", 3*time.Minute, "timeout of each spec")
	flag.BoolVar(&cfg.slow, "slow", false, "run the [Slow] specs too (the chunking spec waits 10 minutes)")
	flag.DurationVar(&cfg.slowTimeout, "slow-spec-timeout", 15*time.Minute, "timeout of each [Slow] spec under --slow")
	flag.IntVar(&cfg.parallel, "parallel", 4, "specs run at once ([Serial] ones always alone)")
	flag.BoolVar(&cfg.allowFailures, "allow-failures", false, "exit 0 even when specs fail")
	flag.StringVar(&extra, "e2e-args", "", "further flags for e2e.test, space-separated")
	flag.Parse()
	cfg.extraArgs = strings.Fields(extra)
	if cfg.kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "conformance: --kubeconfig is required")
		os.Exit(2)
	}
	if cfg.parallel < 1 {
		cfg.parallel = 1
	}
	return cfg
}

// run lists, skips and runs the specs, writes the results and returns the
// exit code: 0 when every spec that ran passed (or failures are allowed),
// 1 otherwise.
func run(ctx context.Context, cfg config) (int, error) {
	// Logs and reports of an earlier run would mix with this one's.
	if err := os.RemoveAll(filepath.Join(cfg.outDir, "specs")); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.outDir, "specs"), 0o755); err != nil {
		return 0, err
	}
	rules, err := skipRules(cfg.skip, cfg.slow)
	if err != nil {
		return 0, err
	}
	specs, err := listSpecs(ctx, cfg, cfg.focus)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	fmt.Printf("%d specs selected by %s; %s per spec, %d at once\n", len(specs), cfg.focus, cfg.specTimeout, cfg.parallel)
	results := runAll(ctx, cfg, specs, rules)
	if ctx.Err() != nil {
		return 0, fmt.Errorf("interrupted")
	}
	sum := summarize(results, time.Since(start))
	if err := writeResults(cfg.outDir, sum); err != nil {
		return 0, err
	}
	fmt.Printf("results: %s\n", filepath.Join(cfg.outDir, "results.md"))
	fmt.Printf("%d passed, %d failed, %d skipped\n", sum.Passed, sum.Failed, sum.Skipped)
	if sum.Failed > 0 && !cfg.allowFailures {
		return 1, nil
	}
	return 0, nil
}

// runAll runs the specs that are not skipped, cfg.parallel at a time, then
// the [Serial] ones one by one, and returns a result per spec in list order.
func runAll(ctx context.Context, cfg config, specs []spec, rules []skipRule) []result {
	results := make([]result, len(specs))
	var parallel, serial []int
	for i, s := range specs {
		if reason := skipReason(rules, s.Text); reason != "" {
			results[i] = result{Spec: s.Text, Outcome: outcomeSkipped, Reason: reason}
			continue
		}
		if s.Serial {
			serial = append(serial, i)
		} else {
			parallel = append(parallel, i)
		}
	}
	var mu sync.Mutex
	done := 0
	runOne := func(i int) {
		r := runSpec(ctx, cfg, specs[i], i)
		mu.Lock()
		defer mu.Unlock()
		results[i] = r
		done++
		fmt.Printf("[%d/%d] %-7s %4.0fs %s\n", done, len(parallel)+len(serial), strings.ToUpper(r.Outcome), r.Seconds, r.Spec)
		if r.Outcome == outcomeFailed {
			fmt.Printf("         %s: %s\n", r.State, r.Reason)
		}
	}
	runPool(ctx, parallel, cfg.parallel, runOne)
	runPool(ctx, serial, 1, runOne)
	return results
}

// runPool calls fn for each index, at most n at once.
func runPool(ctx context.Context, indexes []int, n int, fn func(int)) {
	slots := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, i := range indexes {
		if ctx.Err() != nil {
			break
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}
