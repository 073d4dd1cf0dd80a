package kplanetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// The package's tests run against the real kplane binary of KPLANE_BINARY
// (make test sets it); without it TestMain fails, naming where it looked.
func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(m, mode))
	}
	Main(m, Options{CRDDirectoryPaths: []string{"testdata/crds"}, ErrorIfCRDPathMissing: true})
}

var widgets = schema.GroupVersionResource{Group: "kplanetest.example.com", Version: "v1", Resource: "widgets"}

func eventually(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		last = err
		return ok && err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last error: %v)", what, err, last)
	}
}

func clientsFor(t testing.TB, cfg *rest.Config) (*kubernetes.Clientset, dynamic.Interface) {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, d
}

// TestHundredParallelPlanes: 100 tests at once each get a plane of their
// own, with the Env's CRD Established, and see only their own objects
// while all 100 planes exist; afterwards none is left.
func TestHundredParallelPlanes(t *testing.T) {
	const n = 100
	env := Default()
	var all, ready sync.WaitGroup
	var mu sync.Mutex
	hosts := map[string]string{}
	ready.Add(n)
	for i := range n {
		all.Go(func() {
			t.Run(fmt.Sprintf("plane-%03d", i), func(t *testing.T) {
				var arrived sync.Once
				defer arrived.Do(ready.Done) // a failed subtest must not hold the others
				cfg := Plane(t)
				mu.Lock()
				hosts[cfg.Host] = t.Name()
				mu.Unlock()
				c, d := clientsFor(t, cfg)
				ctx := context.Background()
				me := fmt.Sprint(i)
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine", Labels: map[string]string{"owner": me}}}
				if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kplanetest.example.com/v1", "kind": "Widget",
					"metadata": map[string]any{"name": "w-" + me}, "spec": map[string]any{"size": int64(i)}}}
				if _, err := d.Resource(widgets).Namespace("default").Create(ctx, w, metav1.CreateOptions{}); err != nil {
					t.Fatalf("custom resource right after Plane returned: %v", err)
				}
				arrived.Do(ready.Done)
				ready.Wait()
				cms, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: "owner"})
				if err != nil {
					t.Fatal(err)
				}
				if len(cms.Items) != 1 || cms.Items[0].Labels["owner"] != me {
					t.Errorf("plane of test %d sees configmaps %v, want only its own", i, cms.Items)
				}
				ws, err := d.Resource(widgets).Namespace("default").List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(ws.Items) != 1 || ws.Items[0].GetName() != "w-"+me {
					t.Errorf("plane of test %d sees %d widgets, want only its own", i, len(ws.Items))
				}
			})
		})
	}
	all.Wait()
	if len(hosts) != n {
		t.Errorf("%d distinct plane URLs for %d tests", len(hosts), n)
	}
	for host := range hosts {
		id := strings.TrimSuffix(strings.TrimPrefix(host, env.URL()+"/clusters/"), "/control-plane")
		if err := env.waitGone(context.Background(), id); err != nil {
			t.Errorf("after its test: %v", err)
		}
	}
}

func assertNoPlanesLeft(t *testing.T, env *Env, runID string) {
	t.Helper()
	list, err := env.planes.List(context.Background(), listByRun(runID))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		names := []string{}
		for _, p := range list.Items {
			names = append(names, p.GetName())
		}
		t.Errorf("planes of run %s left behind: %v", runID, names)
	}
}

// TestStopLeavesNothing: Stop deletes the ready planes of the pool and a
// plane nobody deleted, and returns once they are gone.
func TestStopLeavesNothing(t *testing.T) {
	env := Default()
	ctx := context.Background()
	// CRDs of a set no other Env uses: the CRD template is this Env's.
	other, err := Start(ctx, Options{URL: env.URL(), Token: env.AdminConfig().BearerToken, Prewarm: 3,
		CRDDirectoryPaths: []string{"testdata/extra"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool fills", func(context.Context) (bool, error) { return len(other.pool.ready) == 3, nil })
	template, err := crdTemplateID(other.crds)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := env.planes.Get(ctx, template, metav1.GetOptions{}); err != nil || p.GetLabels()[RunLabel] != other.RunID() {
		t.Fatalf("the attached Env's CRD template %s: %v, want it labelled with its run", template, err)
	}
	if _, err := other.CreatePlane(ctx, WithLabels(map[string]string{"kept": "yes"})); err != nil {
		t.Fatal(err)
	}
	left, err := other.LeftoverPlanes(ctx)
	if err != nil || len(left) < 4 {
		t.Fatalf("planes of the run before Stop: %v %v, want the 3 ready and the kept one", left, err)
	}
	if err := other.Stop(); err != nil {
		t.Fatal(err)
	}
	assertNoPlanesLeft(t, env, other.RunID())
	if _, err := env.planes.Get(ctx, template, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the CRD template after Stop: %v, want NotFound", err)
	}
}

// TestCRDTemplates: planes with the Env's CRDs are made from one template
// plane per set of CRDs, however many ask at once; a plane with CRDs of
// its own gets the template of the larger set; NoCRDTemplate installs the
// CRDs into the plane itself.
func TestCRDTemplates(t *testing.T) {
	env := Default()
	ctx := context.Background()
	templateOf := func(cfg *rest.Config) string {
		t.Helper()
		id := strings.TrimSuffix(strings.TrimPrefix(cfg.Host, env.URL()+"/clusters/"), "/control-plane")
		p, err := env.planes.Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		template, _, _ := unstructured.NestedString(p.Object, "spec", "template")
		return template
	}
	want, err := crdTemplateID(env.crds)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				if got := templateOf(Plane(t)); got != want {
					t.Errorf("plane made from %q, want the Env's CRD template %s", got, want)
				}
			})
		})
	}
	wg.Wait()
	templates, err := env.planes.List(ctx, metav1.ListOptions{LabelSelector: CRDTemplateLabel})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range templates.Items {
		names = append(names, p.GetName())
	}
	if !slices.Contains(names, want) {
		t.Errorf("CRD templates %v, want %s among them", names, want)
	}
	withGadgets := templateOf(Plane(t, WithCRDDirectoryPaths("testdata/extra")))
	if withGadgets == want || !strings.HasPrefix(withGadgets, crdTemplatePrefix) {
		t.Errorf("a plane with more CRDs made from %q, want another CRD template than %s", withGadgets, want)
	}

	installed, err := Start(ctx, Options{URL: env.URL(), Token: env.AdminConfig().BearerToken, NoCRDTemplate: true,
		CRDDirectoryPaths: []string{"testdata/crds"}})
	if err != nil {
		t.Fatal(err)
	}
	defer installed.Stop()
	cfg := installed.NewPlane(t)
	if got := templateOf(cfg); got != "" {
		t.Errorf("NoCRDTemplate: plane made from %q, want none", got)
	}
	_, d := clientsFor(t, cfg)
	if crd, err := d.Resource(crdGVR).Get(ctx, "widgets.kplanetest.example.com", metav1.GetOptions{}); err != nil || !established(crd) {
		t.Errorf("NoCRDTemplate: the CRD installed in the plane: %v", err)
	}
}

// TestCRDsPerPlane: a plane's own CRDs (a per-plane option) are in that
// plane only; the Env's are in every plane.
func TestCRDsPerPlane(t *testing.T) {
	withGadgets := Plane(t, WithCRDDirectoryPaths("testdata/extra"))
	plain := Plane(t)
	ctx := context.Background()
	_, d := clientsFor(t, withGadgets)
	gadget := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kplanetest.example.com/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "g"}}}
	gadgets := schema.GroupVersionResource{Group: "kplanetest.example.com", Version: "v1", Resource: "gadgets"}
	if _, err := d.Resource(gadgets).Create(ctx, gadget, metav1.CreateOptions{}); err != nil {
		t.Fatalf("gadget in the plane with the gadget CRD: %v", err)
	}
	_, d = clientsFor(t, plain)
	crds := d.Resource(crdGVR)
	if _, err := crds.Get(ctx, "gadgets.kplanetest.example.com", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the gadget CRD in the other plane: %v, want NotFound", err)
	}
	crd, err := crds.Get(ctx, "widgets.kplanetest.example.com", metav1.GetOptions{})
	if err != nil || !established(crd) {
		t.Errorf("the Env's widget CRD in the plain plane: established=%v, %v", crd != nil && established(crd), err)
	}
	if _, err := d.Resource(gadgets).Create(ctx, gadget, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("creating a gadget where its CRD is not installed: %v, want NotFound", err)
	}
}

// TestBadCRDPath: a missing CRD directory is an error naming it when
// ErrorIfCRDPathMissing is set, and so is a file that is not a CRD.
func TestBadCRDPath(t *testing.T) {
	if _, err := readCRDs([]string{"testdata/nope"}, true); err == nil || !strings.Contains(err.Error(), "testdata/nope") {
		t.Errorf("missing path: %v", err)
	}
	if crds, err := readCRDs([]string{"testdata/nope"}, false); err != nil || len(crds) != 0 {
		t.Errorf("missing path without ErrorIfCRDPathMissing: %v, %d CRDs", err, len(crds))
	}
	dir := t.TempDir()
	os.WriteFile(dir+"/cm.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o600)
	if _, err := readCRDs([]string{dir}, true); err == nil || !strings.Contains(err.Error(), "ConfigMap") {
		t.Errorf("a ConfigMap among the CRDs: %v", err)
	}
	_, err := Default().CreatePlane(context.Background(), WithCRDDirectoryPaths("testdata/nope"))
	if err == nil || !strings.Contains(err.Error(), "testdata/nope") {
		t.Errorf("plane option with a missing path: %v", err)
	}
}

// TestIdentity: an Identity is plane-bound and has only what RBAC grants.
func TestIdentity(t *testing.T) {
	cfg := Plane(t)
	other := Plane(t)
	alice := Identity(t, cfg, "team", "alice")
	if alice.BearerToken == cfg.BearerToken || alice.BearerToken == "" {
		t.Fatal("the identity carries the admin token")
	}
	admin, _ := clientsFor(t, cfg)
	as, _ := clientsFor(t, alice)
	ctx := context.Background()
	if _, err := as.CoreV1().ConfigMaps("team").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice lists configmaps before any binding: %v, want Forbidden", err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "cm-reader", Namespace: "team"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: "team"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cm-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "alice", Namespace: "team"}}}
	if _, err := admin.RbacV1().Roles("team").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings("team").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "alice may list configmaps once bound", func(ctx context.Context) (bool, error) {
		_, err := as.CoreV1().ConfigMaps("team").List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	if _, err := as.CoreV1().Secrets("team").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice lists secrets: %v, want Forbidden", err)
	}
	elsewhere := rest.CopyConfig(alice)
	elsewhere.Host = other.Host
	es, _ := clientsFor(t, elsewhere)
	if _, err := es.CoreV1().ConfigMaps("team").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("alice's token in another plane: %v, want Unauthorized", err)
	}
}

// TestAttach: a second Env attaches to the running server by URL and
// token, and by admin kubeconfig; a wrong token is refused before use.
func TestAttach(t *testing.T) {
	env := Default()
	token := env.AdminConfig().BearerToken
	ctx := context.Background()
	byURL, err := Start(ctx, Options{URL: env.URL(), Token: token, CRDDirectoryPaths: []string{"testdata/extra"}})
	if err != nil {
		t.Fatal(err)
	}
	defer byURL.Stop()
	if byURL.Started() || byURL.RunID() == env.RunID() {
		t.Errorf("attached Env started a server (%v) or shares the run id", byURL.Started())
	}
	cfg := byURL.NewPlane(t)
	_, d := clientsFor(t, cfg)
	if _, err := d.Resource(crdGVR).Get(ctx, "gadgets.kplanetest.example.com", metav1.GetOptions{}); err != nil {
		t.Errorf("the attached Env's CRD in its plane: %v", err)
	}

	kubeconfig := writeKubeconfig(t, env.AdminConfig())
	byFile, err := Start(ctx, Options{Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	defer byFile.Stop()
	c, _ := clientsFor(t, byFile.NewPlane(t))
	if _, err := c.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Errorf("plane of the Env attached by kubeconfig: %v", err)
	}

	_, err = Start(ctx, Options{URL: env.URL(), Token: strings.Repeat("x", 40)})
	if err == nil || !strings.Contains(err.Error(), "not signed with this token") {
		t.Errorf("attaching with a wrong token: %v", err)
	}
	_, err = Start(ctx, Options{URL: env.URL()})
	if err == nil || !strings.Contains(err.Error(), "KPLANE_TOKEN") {
		t.Errorf("attaching without a token: %v", err)
	}
}

// TestTemplateOption: WithTemplate puts spec.template on the Plane. On a
// server with templates the plane starts with the template's objects; on
// one without, the field is refused by name instead of silently dropped.
func TestTemplateOption(t *testing.T) {
	env := Default()
	ctx := context.Background()
	base := env.NewPlaneHandle(t)
	c, _ := clientsFor(t, base.Config)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "scenario"}, Data: map[string]string{"k": "v"}}
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	member, err := env.CreatePlane(ctx, WithTemplate(base.ID))
	if !serverHasTemplates(t, env) {
		if err == nil || !strings.Contains(err.Error(), "template") {
			t.Fatalf("a server without templates accepted spec.template: %v", err)
		}
		t.Logf("this server has no Plane.spec.template; the option is refused clearly: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer member.Delete(ctx)
	if p, err := env.planes.Get(ctx, member.ID, metav1.GetOptions{}); err != nil || p.Object["spec"].(map[string]any)["template"] != base.ID {
		t.Errorf("an explicit template is the member's: %v %v", p, err)
	}
	mc, _ := clientsFor(t, member.Config)
	if got, err := mc.CoreV1().ConfigMaps("default").Get(ctx, "scenario", metav1.GetOptions{}); err != nil || got.Data["k"] != "v" {
		t.Errorf("the template's configmap in the member: %v %v", got, err)
	}
}

// serverHasTemplates reads the Plane CRD's schema in the root plane.
func serverHasTemplates(t *testing.T, env *Env) bool {
	d, err := dynamic.NewForConfig(env.admin)
	if err != nil {
		t.Fatal(err)
	}
	crd, err := d.Resource(crdGVR).Get(context.Background(), "planes.kplane.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		_, found, _ := unstructured.NestedMap(v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "template")
		if found {
			return true
		}
	}
	return false
}

// TestMissingBinary: without any binary the error names every place
// looked at; a KPLANE_BINARY that is not there is named.
func TestMissingBinary(t *testing.T) {
	none := binarySource{getenv: func(k string) string {
		if k == "PATH" {
			return "/nowhere/bin"
		}
		return ""
	}, lookPath: func(string) (string, error) { return "", errors.New("not found") }}
	_, err := findBinary(context.Background(), Options{}, none)
	var missing *MissingBinaryError
	if !errors.As(err, &missing) {
		t.Fatalf("err = %v, want a MissingBinaryError", err)
	}
	for _, want := range []string{"KPLANE_BINARY", "PATH (/nowhere/bin)", "KPLANE_VERSION", "KPLANE_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	given := binarySource{getenv: func(k string) string {
		if k == "KPLANE_BINARY" {
			return "/nowhere/kplane"
		}
		return ""
	}, lookPath: none.lookPath}
	if _, err := findBinary(context.Background(), Options{}, given); err == nil || !strings.Contains(err.Error(), "KPLANE_BINARY=/nowhere/kplane") {
		t.Errorf("a KPLANE_BINARY that does not exist: %v", err)
	}
	if _, err := Start(context.Background(), Options{BinaryPath: "/nowhere/kplane"}); err == nil || !strings.Contains(err.Error(), "/nowhere/kplane") {
		t.Errorf("Start with a BinaryPath that does not exist: %v", err)
	}
}

func TestPlaneIDs(t *testing.T) {
	env := &Env{runID: "abc123"}
	for _, c := range []struct{ test, want string }{
		{"TestX", "testx-abc123-1"},
		{"TestX/Sub_Case#01", "testx-sub-case-01-abc123-2"},
		{"", "plane-abc123-3"},
		{strings.Repeat("Long/", 30), strings.TrimRight(strings.Repeat("long-", 11)[:54], "-") + "-abc123-4"},
	} {
		if got := env.planeID(c.test); got != c.want || len(got) > 63 {
			t.Errorf("planeID(%q) = %q, want %q (at most 63 bytes)", c.test, got, c.want)
		}
	}
}

// TestBadWebhookOptions: what WithWebhooks cannot use is an error naming
// it, before any plane exists.
func TestBadWebhookOptions(t *testing.T) {
	env := Default()
	_, err := env.CreatePlane(context.Background(), WithWebhooks(WebhookOptions{Paths: []string{"testdata/nope"}}))
	if err == nil || !strings.Contains(err.Error(), "testdata/nope") {
		t.Errorf("missing webhook path: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(dir+"/cm.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), 0o600)
	_, err = env.CreatePlane(context.Background(), WithWebhooks(WebhookOptions{Paths: []string{dir}}))
	if err == nil || !strings.Contains(err.Error(), "ConfigMap") {
		t.Errorf("a ConfigMap among the webhook configurations: %v", err)
	}
	_, err = env.CreatePlane(context.Background(), WithWebhooks(WebhookOptions{ConversionCRDs: []string{"gadgets.example.com"}}))
	if err == nil || !strings.Contains(err.Error(), "gadgets.example.com") {
		t.Errorf("conversion for a CRD the plane does not have: %v", err)
	}
}

// TestWithoutSimulation: in a plane made WithoutSimulation a Deployment
// stays as written (no Pods, no status from a controller) while the same
// Deployment in a plane of the same server gets its Pod.
func TestWithoutSimulation(t *testing.T) {
	t.Parallel()
	simulated, _ := clientsFor(t, Plane(t))
	apiOnly, _ := clientsFor(t, Plane(t, WithoutSimulation()))
	deployment := func() *appsv1.Deployment {
		labels := map[string]string{"app": "web"}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}}}
	}
	ctx := t.Context()
	for _, c := range []*kubernetes.Clientset{apiOnly, simulated} {
		if _, err := c.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, deployment(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the simulated plane's Deployment is ready", func(ctx context.Context) (bool, error) {
		d, err := simulated.AppsV1().Deployments(metav1.NamespaceDefault).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 1, err
	})
	d, err := apiOnly.AppsV1().Deployments(metav1.NamespaceDefault).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Status.ObservedGeneration != 0 || d.Status.Replicas != 0 {
		t.Errorf("the API-only plane's Deployment has a controller's status: %+v", d.Status)
	}
	pods, err := apiOnly.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("the API-only plane has pods: %d (%v)", len(pods.Items), err)
	}
}

// TestWithSimulation: a plane made WithSimulation meets its faults from
// its first Pod and has the node shape asked for; SetSimulation replaces
// them in the middle of the test, nil gives the server's defaults back;
// an unknown fault type is refused by the server.
func TestWithSimulation(t *testing.T) {
	t.Parallel()
	plane := Default().NewPlaneHandle(t, WithSimulation(Simulation{
		Nodes:  &Nodes{Count: ptr.To[int32](1)},
		Faults: []Fault{{Type: CrashLoopBackOff, Match: FaultMatch{Image: "*:broken"}, ExitCode: 3}},
	}))
	c, _ := clientsFor(t, plane.Config)
	ctx := t.Context()
	for name, image := range map[string]string{"bad": "app:broken", "good": "nginx"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}}}
		if _, err := c.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podIs := func(name string, cond func(*corev1.Pod) bool) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			p, err := c.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
			return err == nil && cond(p), err
		}
	}
	crashed := func(p *corev1.Pod) bool {
		st := p.Status.ContainerStatuses
		return len(st) == 1 && st[0].LastTerminationState.Terminated != nil && st[0].LastTerminationState.Terminated.ExitCode == 3
	}
	ready := func(want corev1.ConditionStatus) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady {
					return p.Status.Phase == corev1.PodRunning && cond.Status == want
				}
			}
			return false
		}
	}
	eventually(t, "pod bad crashed with exit code 3", podIs("bad", crashed))
	eventually(t, "pod good ready", podIs("good", ready(corev1.ConditionTrue)))
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("nodes: %v, %v; asked for 1", nodes, err)
	}

	if err := plane.SetSimulation(ctx, &Simulation{Faults: []Fault{{Type: NotReady, Match: FaultMatch{Image: "nginx"}}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod good not ready under the new fault", podIs("good", ready(corev1.ConditionFalse)))
	if err := plane.SetSimulation(ctx, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod good ready once the faults are gone", podIs("good", ready(corev1.ConditionTrue)))

	// A plane made without one is given one as well.
	plain := Default().NewPlaneHandle(t)
	if err := plain.SetSimulation(ctx, &Simulation{ReadyDelay: &metav1.Duration{Duration: time.Second}}); err != nil {
		t.Fatalf("a simulation for a plane made without one: %v", err)
	}

	_, err = Default().CreatePlane(ctx, WithSimulation(Simulation{Faults: []Fault{{Type: "Explode"}}}))
	if !apierrors.IsInvalid(err) {
		t.Fatalf("a plane with fault type Explode: want 422, got %v", err)
	}
}
