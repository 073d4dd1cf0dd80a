package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"kplane.dev/kplane/sdk/go/kplanetest"

	servingv1alpha1 "kplane.dev/kplane/examples/rayserve-operator/api/v1alpha1"
)

// crdDir holds the CRDs controller-gen writes (make generate).
var crdDir = filepath.Join("..", "..", "config", "crd", "bases")

// One kplane server for the test binary; every test of
// TestRayServeOnKplane takes a plane of its own from it.
func TestMain(m *testing.M) {
	if os.Getenv("RAYSERVE_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	kplanetest.Main(m, kplanetest.Options{CRDDirectoryPaths: []string{crdDir}, ErrorIfCRDPathMissing: true})
}

func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(servingv1alpha1.AddToScheme(scheme))
	return scheme
}

// TestRayServeOnKplane runs every case in parallel, each in a plane of its
// own with an operator of its own: nothing one case does can reach another.
//
// RAYSERVE_SIMULATION=off makes every plane API-only, as envtest is:
// nothing moves the Deployments the operator makes, so the server answers
// what envtest's kube-apiserver answers for the same cases, garbage
// collection aside.
func TestRayServeOnKplane(t *testing.T) {
	timings := newTimings("kplane")
	t.Cleanup(func() { timings.write(t) }) // after the parallel subtests
	apiOnlySuite := os.Getenv("RAYSERVE_SIMULATION") == "off"
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			apiOnly := tc.apiOnly || apiOnlySuite
			var opts []kplanetest.PlaneOption
			if apiOnly {
				opts = append(opts, kplanetest.WithoutSimulation())
			}
			cfg := kplanetest.Plane(t, opts...)
			timings.addSetup(time.Since(start))
			startOperator(t, cfg)
			h := newHarness(t, cfg, "apps", true)
			h.simulated = !apiOnly
			tc.run(h)
		})
	}
}

// TestRayServeOnEnvtest runs the same cases the way a kubebuilder project
// does today: one kube-apiserver and etcd for the suite (no garbage
// collector: no kube-controller-manager), one operator, a namespace per
// case, one case after another.
func TestRayServeOnEnvtest(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		msg := "envtest needs kube-apiserver and etcd in KUBEBUILDER_ASSETS; `make envtest-assets` in the kplane checkout builds them " +
			"from its go.mod (the usual download, setup-envtest, needs network access to its release bucket)"
		if os.Getenv("RAYSERVE_REQUIRE_ENVTEST") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	timings := newTimings("envtest")
	t.Cleanup(func() { timings.write(t) })
	start := time.Now()
	env := &envtest.Environment{CRDDirectoryPaths: []string{crdDir}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	timings.Startup = time.Since(start).Seconds()
	startOperator(t, cfg)
	for i, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			h := newHarness(t, cfg, fmt.Sprintf("case-%03d", i), false)
			timings.addSetup(time.Since(start))
			tc.run(h)
		})
	}
}

// startOperator runs the operator's manager on cfg until the test ends.
func startOperator(t *testing.T, cfg *rest.Config) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 newScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Every parallel test runs its own manager with the same
		// controller in this one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&RayServeReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the manager's cache did not sync")
	}
}

// harness is what a case gets: an uncached client (what it reads is the
// API's state, not a cache's), its namespace, whether a garbage collector
// runs and whether workloads do (Deployments get Pods that become ready).
type harness struct {
	t         *testing.T
	ctx       context.Context
	cfg       *rest.Config
	c         client.Client
	ns        string
	hasGC     bool
	simulated bool
}

func newHarness(t *testing.T, cfg *rest.Config, ns string, hasGC bool) *harness {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: newScheme()})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ctx: context.Background(), cfg: cfg, c: c, ns: ns, hasGC: hasGC}
	if err := c.Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return h
}

// eventually polls cond until it returns nil (30 s at most, or
// RAYSERVE_TIMEOUT) and fails the test with cond's last error.
func (h *harness) eventually(what string, cond func(ctx context.Context) error) {
	h.t.Helper()
	timeout := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv("RAYSERVE_TIMEOUT")); err == nil {
		timeout = d
	}
	var last error
	err := wait.PollUntilContextTimeout(h.ctx, 10*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		h.t.Fatalf("%s: %v", what, last)
	}
}

// timings are the per-test setup times of one suite, written as a JSON
// line to $RAYSERVE_TIMINGS for scripts/bench (scenario gotest).
type timings struct {
	Backend string    `json:"backend"`
	Startup float64   `json:"startupSeconds,omitempty"`
	Setup   []float64 `json:"setupSeconds"`
	Suite   float64   `json:"suiteSeconds"`
	start   time.Time
	mu      sync.Mutex
}

func newTimings(backend string) *timings { return &timings{Backend: backend, start: time.Now()} }

func (tm *timings) addSetup(d time.Duration) {
	tm.mu.Lock()
	tm.Setup = append(tm.Setup, d.Seconds())
	tm.mu.Unlock()
}

// write runs after the suite's parallel subtests have finished.
func (tm *timings) write(t testing.TB) {
	path := os.Getenv("RAYSERVE_TIMINGS")
	if path == "" {
		return
	}
	tm.Suite = time.Since(tm.start).Seconds()
	line, err := json.Marshal(tm)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
}

// TestEnvtestEnvironmentOnAPlane is the migration path for suites that
// keep envtest's Environment: UseExistingCluster with a plane's config
// installs the CRDs there and starts nothing.
func TestEnvtestEnvironmentOnAPlane(t *testing.T) {
	t.Parallel()
	env := &envtest.Environment{UseExistingCluster: ptr.To(true), Config: kplanetest.Plane(t),
		CRDDirectoryPaths: []string{crdDir}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest on a plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	startOperator(t, cfg)
	h := newHarness(t, cfg, "apps", true)
	h.expectChildren(h.create("rs", variantNamed("big-config").spec).Name)
}
