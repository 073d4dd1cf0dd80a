package webhook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"kplane.dev/kplane/sdk/go/kplanetest"

	servingv1alpha1 "kplane.dev/kplane/examples/rayserve-operator/api/v1alpha1"
	servingv1beta1 "kplane.dev/kplane/examples/rayserve-operator/api/v1beta1"
	"kplane.dev/kplane/examples/rayserve-operator/internal/controller"
)

var (
	crdDir     = filepath.Join("..", "..", "config", "crd", "bases")
	webhookDir = filepath.Join("..", "..", "config", "webhook")
)

// The CRD is the plain controller-gen output: as a kubebuilder project's
// CRD patch does, the test asks for its conversion by webhook.
var webhookOptions = kplanetest.WebhookOptions{
	Paths:          []string{webhookDir},
	ConversionCRDs: []string{"rayserves.serving.example.com"},
}

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
	utilruntime.Must(servingv1beta1.AddToScheme(scheme))
	return scheme
}

// TestWebhooksOnKplane: the operator serves its defaulting, validating and
// conversion webhooks from the test process, for its plane only.
func TestWebhooksOnKplane(t *testing.T) {
	t.Parallel()
	plane := kplanetest.Default().NewPlaneHandle(t, kplanetest.WithWebhooks(webhookOptions))
	c := newClient(t, plane.Config)
	ctx := context.Background()

	// Nothing serves the webhooks yet, and they fail closed: the plane
	// calls them.
	err := c.Create(ctx, rayServe("early", "rayproject/ray"))
	if err == nil || !strings.Contains(err.Error(), "mrayserve-v1alpha1.kb.io") {
		t.Fatalf("create with the webhook server down: %v, want a refusal naming the webhook", err)
	}

	startOperator(t, plane)

	t.Run("defaulting", func(t *testing.T) {
		rs := rayServe("untagged", "rayproject/ray")
		if err := c.Create(ctx, rs); err != nil {
			t.Fatal(err)
		}
		if want := "rayproject/ray:" + DefaultImageTag; rs.Spec.Image != want {
			t.Fatalf("image %q, want %q", rs.Spec.Image, want)
		}
		tagged := rayServe("tagged", "registry.example.com:5000/ray")
		if err := c.Create(ctx, tagged); err != nil {
			t.Fatal(err)
		}
		if want := "registry.example.com:5000/ray:" + DefaultImageTag; tagged.Spec.Image != want {
			t.Fatalf("image %q, want %q (a registry port is no tag)", tagged.Spec.Image, want)
		}
	})

	t.Run("validating", func(t *testing.T) {
		bad := rayServe("bad-config", "rayproject/ray:2.40.0")
		bad.Spec.ServeConfig = map[string]string{"notes.txt": "x"}
		err := c.Create(ctx, bad)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.serveConfig[notes.txt]") {
			t.Fatalf("create with a non-YAML key: %v, want 422 naming spec.serveConfig[notes.txt]", err)
		}
		rs := rayServe("fixed-port", "rayproject/ray:2.40.0")
		if err := c.Create(ctx, rs); err != nil {
			t.Fatal(err)
		}
		rs.Spec.Port = 9000
		err = c.Update(ctx, rs)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.port") {
			t.Fatalf("port change: %v, want 422 naming spec.port", err)
		}
	})

	t.Run("conversion", func(t *testing.T) {
		beta := &servingv1beta1.RayServe{
			ObjectMeta: metav1.ObjectMeta{Name: "beta", Namespace: "default"},
			Spec:       servingv1beta1.RayServeSpec{Server: servingv1beta1.ServerSpec{Image: "rayproject/ray", Port: 9100}},
		}
		// Admitted at v1alpha1 (the webhooks' version, matchPolicy
		// Equivalent): converted, defaulted, converted back.
		if err := c.Create(ctx, beta); err != nil {
			t.Fatal(err)
		}
		if want := "rayproject/ray:" + DefaultImageTag; beta.Spec.Server.Image != want {
			t.Fatalf("v1beta1 image %q, want %q", beta.Spec.Server.Image, want)
		}
		alpha := &servingv1alpha1.RayServe{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(beta), alpha); err != nil {
			t.Fatal(err)
		}
		if alpha.Spec.Image != beta.Spec.Server.Image || alpha.Spec.Port != 9100 {
			t.Fatalf("read at v1alpha1: image %q port %d, want %q 9100", alpha.Spec.Image, alpha.Spec.Port, beta.Spec.Server.Image)
		}
		list := &servingv1beta1.RayServeList{}
		if err := c.List(ctx, list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		images := map[string]string{}
		for _, item := range list.Items {
			images[item.Name] = item.Spec.Server.Image
		}
		if images["untagged"] != "rayproject/ray:"+DefaultImageTag {
			t.Fatalf("v1alpha1 objects listed at v1beta1: %v", images)
		}
	})

	t.Run("operator", func(t *testing.T) {
		// The operator's reconciler runs in the same manager: the
		// webhooks' objects get their children.
		eventually(t, "the Deployment of untagged", func(ctx context.Context) error {
			return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "untagged"}, &metav1.PartialObjectMetadata{
				TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}})
		})
	})
}

// TestWebhooksStayInTheirPlane: a plane without the webhooks admits what
// the other plane's webhooks refuse, and defaults nothing.
func TestWebhooksStayInTheirPlane(t *testing.T) {
	t.Parallel()
	withHooks := kplanetest.Default().NewPlaneHandle(t, kplanetest.WithWebhooks(webhookOptions))
	startOperator(t, withHooks)
	plain := newClient(t, kplanetest.Plane(t))
	ctx := context.Background()

	rs := rayServe("untagged", "rayproject/ray")
	rs.Spec.ServeConfig = map[string]string{"notes.txt": "x"}
	if err := plain.Create(ctx, rs); err != nil {
		t.Fatalf("a plane without webhooks refused: %v", err)
	}
	if rs.Spec.Image != "rayproject/ray" {
		t.Fatalf("a plane without webhooks defaulted the image to %q", rs.Spec.Image)
	}
	err := newClient(t, withHooks.Config).Create(ctx, rs.DeepCopyObject().(client.Object))
	if !apierrors.IsInvalid(err) {
		t.Fatalf("the plane with webhooks admitted %v: %v", rs.Spec.ServeConfig, err)
	}
}

func rayServe(name, image string) *servingv1alpha1.RayServe {
	return &servingv1alpha1.RayServe{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       servingv1alpha1.RayServeSpec{Image: image},
	}
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: newScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startOperator runs the operator, its webhooks included, on the plane's
// webhook server until the test ends.
func startOperator(t *testing.T, plane *kplanetest.PlaneHandle) {
	t.Helper()
	hooks := plane.Webhook
	mgr, err := ctrl.NewManager(plane.Config, ctrl.Options{
		Scheme:                 newScheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          crwebhook.NewServer(crwebhook.Options{Host: hooks.Host, Port: hooks.Port, CertDir: hooks.CertDir}),
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(mgr); err != nil {
		t.Fatal(err)
	}
	if err := (&controller.RayServeReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme()}).SetupWithManager(mgr); err != nil {
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
	waitCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := hooks.WaitServing(waitCtx); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, last)
	}
}

// TestEnvtestWebhookInstallOptionsOnAPlane is the migration path for a
// suite that keeps envtest's Environment: on a plane's config, its
// WebhookInstallOptions install the webhooks and the CRD conversion there,
// pointed at the server envtest prepared, and start nothing else.
func TestEnvtestWebhookInstallOptionsOnAPlane(t *testing.T) {
	t.Parallel()
	env := &envtest.Environment{
		UseExistingCluster: ptr.To(true),
		Config:             kplanetest.Plane(t),
		Scheme:             newScheme(),
		CRDInstallOptions: envtest.CRDInstallOptions{
			// The scheme's convertible types get the conversion webhook.
			Paths: []string{crdDir}, ErrorIfPathMissing: true, Scheme: newScheme(),
		},
		WebhookInstallOptions: envtest.WebhookInstallOptions{Paths: []string{webhookDir}},
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest on a plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	hooks := env.WebhookInstallOptions
	startOperator(t, &kplanetest.PlaneHandle{Config: cfg, Webhook: &kplanetest.WebhookServer{
		Host: hooks.LocalServingHost, Port: hooks.LocalServingPort, CertDir: hooks.LocalServingCertDir, CAData: hooks.LocalServingCAData}})
	c := newClient(t, cfg)
	ctx := context.Background()
	beta := &servingv1beta1.RayServe{
		ObjectMeta: metav1.ObjectMeta{Name: "beta", Namespace: "default"},
		Spec:       servingv1beta1.RayServeSpec{Server: servingv1beta1.ServerSpec{Image: "rayproject/ray"}},
	}
	if err := c.Create(ctx, beta); err != nil {
		t.Fatal(err)
	}
	if want := "rayproject/ray:" + DefaultImageTag; beta.Spec.Server.Image != want {
		t.Fatalf("v1beta1 image %q, want %q", beta.Spec.Server.Image, want)
	}
}
