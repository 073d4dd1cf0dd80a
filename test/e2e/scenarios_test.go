package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"kplane.dev/kplane/test/e2e/framework"
)

var planesGVR = schema.GroupVersionResource{Group: "kplane.dev", Version: "v1", Resource: "planes"}

// createPlane creates a Plane in root, from template when it is not empty,
// and waits until the plane answers ready.
func createPlane(t *testing.T, s *framework.Server, name, template string) {
	t.Helper()
	spec := map[string]any{}
	if template != "" {
		spec["template"] = template
	}
	if _, err := s.Dynamic(t, "root").Resource(planesGVR).Create(context.Background(), newPlane(name, spec), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating plane %s from %q: %v", name, template, err)
	}
	c := s.Client(t, name)
	framework.Eventually(t, framework.DefaultTimeout, "plane "+name+" ready", func(ctx context.Context) error {
		_, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// newPlane is a Plane object named name with spec (none if nil), for a
// create in the root plane.
func newPlane(name string, spec map[string]any) *unstructured.Unstructured {
	p := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kplane.dev/v1", "kind": "Plane",
		"metadata": map[string]any{"name": name}}}
	if spec != nil {
		p.Object["spec"] = spec
	}
	return p
}

// resetPlane POSTs /reset to plane and returns the HTTP status.
func resetPlane(t *testing.T, s *framework.Server, plane string) int {
	t.Helper()
	code, err := postReset(s, plane)
	if err != nil {
		t.Fatalf("reset %s: %v", plane, err)
	}
	return code
}

func postReset(s *framework.Server, plane string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, s.PlaneURL(plane)+"/reset", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.AdminToken())
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// seedScenario writes a small scenario into plane: a namespace with
// ConfigMaps, Secrets, a ServiceAccount, a Role and a RoleBinding.
func seedScenario(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: "shop",
			Labels: map[string]string{"tier": []string{"web", "db"}[i%2]}}, Data: map[string]string{"v": fmt.Sprint(i)}}
		if _, err := c.CoreV1().ConfigMaps("shop").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i), Namespace: "shop"}, StringData: map[string]string{"k": fmt.Sprint(i)}}
		if _, err := c.CoreV1().Secrets("shop").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot", Namespace: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: "shop"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}}
	if _, err := c.RbacV1().Roles("shop").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "robot-reads", Namespace: "shop"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "robot", Namespace: "shop"}}}
	if _, err := c.RbacV1().RoleBindings("shop").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The namespace's default ServiceAccount comes from a controller: the
	// scenario is complete once it is there.
	framework.Eventually(t, framework.DefaultTimeout, "ServiceAccount shop/default", func(ctx context.Context) error {
		_, err := c.CoreV1().ServiceAccounts("shop").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// scenarioKinds are the resources the scenario tests compare.
var scenarioKinds = []schema.GroupVersionResource{
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "serviceaccounts"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	{Version: "v1", Resource: "namespaces"},
}

// opKinds are the resources random operations touch: the namespaced
// scenario kinds and a custom resource (seedCustomResources).
var opKinds = append(append([]schema.GroupVersionResource{}, scenarioKinds[:5]...), rayGVR)

// seedCustomResources installs the RayService CRD in plane and creates
// RayServices rs-0..rs-2 in namespace shop.
func seedCustomResources(t *testing.T, s *framework.Server, plane string) {
	t.Helper()
	crdYAML, err := os.ReadFile("testdata/rayservices-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s.MustKubectl(t, plane, string(crdYAML), "apply", "-f", "-")
	waitEstablished(t, s, plane, "rayservices.ray.example.com")
	for i := range 3 {
		obj := newScenarioObject(rayGVR, fmt.Sprintf("rs-%d", i), "web")
		if _, err := s.Dynamic(t, plane).Resource(rayGVR).Namespace("shop").Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// customState is plane's RayServices in namespace shop, as planeState.
func customState(t *testing.T, d dynamic.Interface) map[string]string {
	t.Helper()
	list, err := d.Resource(rayGVR).Namespace("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing rayservices: %v", err)
	}
	out := map[string]string{}
	for _, item := range list.Items {
		out["rayservices/"+item.GetName()] = withoutPlaneDetails(&item)
	}
	return out
}

// planeState is a plane's objects of scenarioKinds, without what differs
// between two planes holding the same objects (uid, resourceVersion,
// timestamps, managed fields, the plane annotation).
func planeState(t *testing.T, d dynamic.Interface) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, gvr := range scenarioKinds {
		list, err := d.Resource(gvr).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing %s: %v", gvr.Resource, err)
		}
		for _, item := range list.Items {
			if gvr.Resource == "configmaps" && item.GetName() == "kube-root-ca.crt" {
				continue
			}
			out[gvr.Resource+"/"+item.GetNamespace()+"/"+item.GetName()] = withoutPlaneDetails(&item)
		}
	}
	return out
}

func diffStates(a, b map[string]string) string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var diffs []string
	for _, k := range keys {
		if a[k] != b[k] {
			diffs = append(diffs, fmt.Sprintf("%s:\n  %s\n  %s", k, a[k], b[k]))
		}
	}
	return strings.Join(diffs, "\n")
}

// TestTemplateMembersAreLayers: members of a template start as its state,
// change only themselves, and the template is read-only while they exist.
func TestTemplateMembersAreLayers(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	tmpl := uniquePlane(t, "tmpl")
	createPlane(t, s, tmpl, "")
	seedScenario(t, s.Client(t, tmpl))
	templateState := planeState(t, s.Dynamic(t, tmpl))

	a, b := uniquePlane(t, "member-a"), uniquePlane(t, "member-b")
	createPlane(t, s, a, tmpl)
	createPlane(t, s, b, tmpl)
	ca := s.Client(t, a)
	if d := diffStates(templateState, planeState(t, s.Dynamic(t, a))); d != "" {
		t.Fatalf("a new member differs from its template:\n%s", d)
	}

	// A change in a is a's only.
	cm, err := ca.CoreV1().ConfigMaps("shop").Get(ctx, "cm-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["v"] = "changed"
	if _, err := ca.CoreV1().ConfigMaps("shop").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating an inherited object: %v", err)
	}
	if err := ca.CoreV1().Secrets("shop").Delete(ctx, "s-2", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting an inherited object: %v", err)
	}
	if _, err := ca.CoreV1().Secrets("shop").Get(ctx, "s-2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a deleted inherited object: want 404, got %v", err)
	}
	for _, plane := range []string{b, tmpl} {
		got, err := s.Client(t, plane).CoreV1().ConfigMaps("shop").Get(ctx, "cm-1", metav1.GetOptions{})
		if err != nil || got.Data["v"] != "1" {
			t.Fatalf("%s sees a's change: %v %v", plane, got.Data, err)
		}
		if _, err := s.Client(t, plane).CoreV1().Secrets("shop").Get(ctx, "s-2", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s lost the secret a deleted: %v", plane, err)
		}
	}
	// Label selectors and paging see the merged view.
	web, err := ca.CoreV1().ConfigMaps("shop").List(ctx, metav1.ListOptions{LabelSelector: "tier=web"})
	if err != nil || len(web.Items) != 3 {
		t.Fatalf("tier=web in a: %d items, %v", len(web.Items), err)
	}
	var paged []string
	opts := metav1.ListOptions{Limit: 4}
	for {
		page, err := ca.CoreV1().Secrets("shop").List(ctx, opts)
		if err != nil {
			t.Fatalf("paging: %v", err)
		}
		for _, item := range page.Items {
			paged = append(paged, item.Name)
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	if strings.Join(paged, ",") != "s-0,s-1,s-3,s-4,s-5" {
		t.Fatalf("paged secrets of a: %v", paged)
	}

	// The template is read-only and cannot be deleted while used.
	_, err = s.Client(t, tmpl).CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "shop"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), a) {
		t.Fatalf("writing a used template: want 403 naming its members, got %v", err)
	}
	err = s.Dynamic(t, "root").Resource(planesGVR).Delete(ctx, tmpl, metav1.DeleteOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), b) {
		t.Fatalf("deleting a used template: want 409 naming its members, got %v", err)
	}
}

// TestTemplateBadInput: a template that cannot be used is refused with 422.
func TestTemplateBadInput(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	name := uniquePlane(t, "badtmpl")
	for template, want := range map[string]string{
		"no-such-plane": "does not exist",
		name:            "its own template",
		"root":          "root plane cannot be a template",
	} {
		_, err := s.Dynamic(t, "root").Resource(planesGVR).Create(ctx, newPlane(name, map[string]any{"template": template}), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("template %q: want 422 saying %q, got %v", template, want, err)
		}
	}
	if code := resetPlane(t, s, "never-created-plane"); code != http.StatusNotFound {
		t.Errorf("reset of an unknown plane: %d, want 404", code)
	}
	// spec.template is fixed at creation.
	tmpl := uniquePlane(t, "fixed")
	createPlane(t, s, tmpl, "")
	plain := uniquePlane(t, "plain")
	createPlane(t, s, plain, "")
	patch := []byte(fmt.Sprintf(`{"spec":{"template":%q}}`, tmpl))
	if _, err := s.Dynamic(t, "root").Resource(planesGVR).Patch(ctx, plain, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("setting spec.template later: want 422, got %v", err)
	}
}

// TestTemplateEquivalence runs the same random operations against a member
// of a template and against a plane holding the same objects as copies:
// every answer, the final state and each watch's event sequence agree.
func TestTemplateEquivalence(t *testing.T) {
	t.Parallel()
	s := shared
	tmpl, member, copied := uniquePlane(t, "eq-tmpl"), uniquePlane(t, "eq-member"), uniquePlane(t, "eq-copy")
	createPlane(t, s, tmpl, "")
	seedScenario(t, s.Client(t, tmpl))
	seedCustomResources(t, s, tmpl)
	createPlane(t, s, member, tmpl)
	createPlane(t, s, copied, "")
	seedScenario(t, s.Client(t, copied))
	seedCustomResources(t, s, copied)
	if d := diffStates(fullState(t, s.Dynamic(t, member)), fullState(t, s.Dynamic(t, copied))); d != "" {
		t.Fatalf("the member and the copy differ before any operation:\n%s", d)
	}
	dm, dc := s.Dynamic(t, member), s.Dynamic(t, copied)
	wm, wc := startRecording(t, dm), startRecording(t, dc)

	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	for i := range 240 {
		op := randomOp(rng)
		am, ac := op(dm), op(dc)
		if am != ac {
			t.Fatalf("seed %d, operation %d: the member answered\n  %s\nthe copy answered\n  %s", seed, i, am, ac)
		}
	}
	if d := diffStates(fullState(t, dm), fullState(t, dc)); d != "" {
		t.Fatalf("seed %d: final states differ:\n%s", seed, d)
	}
	framework.Eventually(t, framework.DefaultTimeout, "the same watch events in both planes", func(context.Context) error {
		em, ec := wm.events(), wc.events()
		if strings.Join(em, "\n") != strings.Join(ec, "\n") {
			return fmt.Errorf("member %d events, copy %d; first difference: %s", len(em), len(ec), firstDifference(em, ec))
		}
		return nil
	})

	// Deleting the namespace the template holds deletes everything in it,
	// inherited or not, as it does in the copy.
	for _, plane := range []string{member, copied} {
		if err := s.Client(t, plane).CoreV1().Namespaces().Delete(context.Background(), "shop", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, plane := range []string{member, copied} {
		c := s.Client(t, plane)
		framework.Eventually(t, framework.DefaultTimeout, "namespace shop of "+plane+" gone", func(ctx context.Context) error {
			_, err := c.CoreV1().Namespaces().Get(ctx, "shop", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
	}
	if d := diffStates(fullState(t, dm), fullState(t, dc)); d != "" {
		t.Fatalf("seed %d: states differ after the namespace's deletion:\n%s", seed, d)
	}
	if got := fullState(t, dm); len(got) == 0 {
		t.Fatal("the member has no objects left at all: the comparison compared nothing")
	}
	for key := range fullState(t, dm) {
		if strings.Contains(key, "/shop/") || strings.HasPrefix(key, "rayservices/") || key == "namespaces//shop" {
			t.Fatalf("%s survived its namespace's deletion", key)
		}
	}
	if _, err := s.Client(t, tmpl).CoreV1().ConfigMaps("shop").Get(context.Background(), "cm-0", metav1.GetOptions{}); err != nil {
		t.Fatalf("the member's namespace deletion reached its template: %v", err)
	}
}

// fullState is planeState with the plane's RayServices.
func fullState(t *testing.T, d dynamic.Interface) map[string]string {
	t.Helper()
	out := planeState(t, d)
	for k, v := range customState(t, d) {
		out[k] = v
	}
	return out
}

func firstDifference(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			from, to := max(0, i-3), min(len(a), len(b), i+4)
			return fmt.Sprintf("#%d member %s, copy %s\nmember %v\ncopy   %v", i, a[i], b[i], a[from:to], b[from:to])
		}
	}
	return "one is a prefix of the other"
}

// randomOp returns one operation on the scenario's kinds in namespace shop;
// its answer is what a client sees, without what differs between planes.
func randomOp(rng *rand.Rand) func(dynamic.Interface) string {
	gvr := opKinds[rng.Intn(len(opKinds))]
	name := fmt.Sprintf("%s-%d", map[string]string{"configmaps": "cm", "secrets": "s", "serviceaccounts": "sa",
		"roles": "r", "rolebindings": "rb", "rayservices": "rs"}[gvr.Resource], rng.Intn(8))
	if gvr.Resource == "serviceaccounts" && rng.Intn(2) == 0 {
		name = "robot"
	}
	label := []string{"web", "db", "cache"}[rng.Intn(3)]
	ctx := context.Background()
	answer := func(u *unstructured.Unstructured, err error) string {
		if err != nil {
			return fmt.Sprintf("error %d", statusCode(err))
		}
		return strings.TrimSpace(withoutPlaneDetails(u))
	}
	switch rng.Intn(6) {
	case 0:
		return func(d dynamic.Interface) string {
			return "get " + answer(d.Resource(gvr).Namespace("shop").Get(ctx, name, metav1.GetOptions{}))
		}
	case 1:
		return func(d dynamic.Interface) string {
			obj := newScenarioObject(gvr, name, label)
			return "create " + answer(d.Resource(gvr).Namespace("shop").Create(ctx, obj, metav1.CreateOptions{}))
		}
	case 2:
		patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"tier":%q,"step":%q}}}`, label, fmt.Sprint(rng.Intn(3))))
		return func(d dynamic.Interface) string {
			return "patch " + answer(d.Resource(gvr).Namespace("shop").Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}))
		}
	case 3:
		return func(d dynamic.Interface) string {
			err := d.Resource(gvr).Namespace("shop").Delete(ctx, name, metav1.DeleteOptions{})
			return fmt.Sprintf("delete %d", statusCode(err))
		}
	case 4:
		return func(d dynamic.Interface) string {
			obj := newScenarioObject(gvr, name, label)
			return "apply " + answer(d.Resource(gvr).Namespace("shop").Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: "eq", Force: true}))
		}
	default:
		selector := "tier=" + label
		return func(d dynamic.Interface) string {
			list, err := d.Resource(gvr).Namespace("shop").List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return fmt.Sprintf("list error %d", statusCode(err))
			}
			var names []string
			for _, item := range list.Items {
				names = append(names, item.GetName())
			}
			return "list " + strings.Join(names, ",")
		}
	}
}

func newScenarioObject(gvr schema.GroupVersionResource, name, label string) *unstructured.Unstructured {
	kind := map[string]string{"configmaps": "ConfigMap", "secrets": "Secret", "serviceaccounts": "ServiceAccount",
		"roles": "Role", "rolebindings": "RoleBinding", "rayservices": "RayService"}[gvr.Resource]
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": "shop", "labels": map[string]any{"tier": label}}}}
	switch gvr.Resource {
	case "configmaps":
		u.Object["data"] = map[string]any{"v": label}
	case "roles":
		u.Object["rules"] = []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"get"}}}
	case "rolebindings":
		u.Object["roleRef"] = map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}
	case "rayservices":
		u.Object["spec"] = rayService(name, "https://m.example.com/"+label).Object["spec"]
	}
	return u
}

// withoutPlaneDetails is u as JSON without what differs between two
// planes holding the same object (uid, resourceVersion, timestamps,
// managed fields, the plane annotation).
func withoutPlaneDetails(u *unstructured.Unstructured) string {
	c := u.DeepCopy()
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"} {
		unstructured.RemoveNestedField(c.Object, "metadata", f)
	}
	annotations := c.GetAnnotations()
	delete(annotations, "kplane.dev/plane")
	c.SetAnnotations(annotations)
	if len(annotations) == 0 {
		unstructured.RemoveNestedField(c.Object, "metadata", "annotations")
	}
	data, _ := c.MarshalJSON()
	return string(data)
}

// recording is a watch of every scenario kind in namespace shop, from now.
type recording struct {
	ch  chan string
	got []string
}

func startRecording(t *testing.T, d dynamic.Interface) *recording {
	t.Helper()
	r := &recording{ch: make(chan string, 4096)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, gvr := range opKinds {
		list, err := d.Resource(gvr).Namespace("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := d.Resource(gvr).Namespace("shop").Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type != watch.Bookmark {
					r.ch <- fmt.Sprintf("%s %s/%s", ev.Type, gvr.Resource, u.GetName())
				}
			}
		}()
	}
	return r
}

// events returns what the watches delivered so far, per resource in order
// (events of different resources have no order between them).
func (r *recording) events() []string {
	for {
		select {
		case e := <-r.ch:
			r.got = append(r.got, e)
			continue
		default:
		}
		break
	}
	byResource := map[string][]string{}
	for _, e := range r.got {
		res := strings.SplitN(strings.Fields(e)[1], "/", 2)[0]
		byResource[res] = append(byResource[res], e)
	}
	var out []string
	for _, gvr := range opKinds {
		out = append(out, byResource[gvr.Resource]...)
	}
	return out
}

// TestResetReturnsToTemplate: after random changes a reset gives back the
// template's exact state, and an informer running across it ends equal to
// the plane.
func TestResetReturnsToTemplate(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	tmpl, member := uniquePlane(t, "rs-tmpl"), uniquePlane(t, "rs-member")
	createPlane(t, s, tmpl, "")
	seedScenario(t, s.Client(t, tmpl))
	want := planeState(t, s.Dynamic(t, tmpl))
	createPlane(t, s, member, tmpl)
	c := s.Client(t, member)

	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace("shop"))
	informer := factory.Core().V1().ConfigMaps().Informer()
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	go informer.RunWithContext(ictx)
	if !cache.WaitForCacheSync(ictx.Done(), informer.HasSynced) {
		t.Fatal("informer did not sync")
	}

	d := s.Dynamic(t, member)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	// Several episodes: from the second reset on, a server alone on its
	// datastore looks only where the plane wrote since the last one.
	for episode := 1; episode <= 3; episode++ {
		for range 50 {
			randomOp(rng)(d)
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "extra"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The same address every episode: an allocation a reset left
		// behind would refuse it.
		if _, err := c.CoreV1().Services("extra").Create(ctx, service("web", "10.96.100.101", corev1.ServiceTypeClusterIP), metav1.CreateOptions{}); err != nil {
			t.Fatalf("episode %d: %v", episode, err)
		}
		if code := resetPlane(t, s, member); code != http.StatusOK {
			t.Fatalf("episode %d: reset: HTTP %d", episode, code)
		}
		if d := diffStates(want, planeState(t, s.Dynamic(t, member))); d != "" {
			t.Fatalf("after reset %d the member differs from its template:\n%s", episode, d)
		}
	}
	framework.Eventually(t, framework.DefaultTimeout, "the informer's cache equal to the plane", func(ctx context.Context) error {
		list, err := c.CoreV1().ConfigMaps("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		inPlane := map[string]string{}
		for _, cm := range list.Items {
			inPlane[cm.Name] = cm.ResourceVersion
		}
		inCache := map[string]string{}
		for _, obj := range informer.GetStore().List() {
			cm := obj.(*corev1.ConfigMap)
			inCache[cm.Name] = cm.ResourceVersion
		}
		if fmt.Sprint(inPlane) != fmt.Sprint(inCache) {
			return fmt.Errorf("plane %v, informer %v", inPlane, inCache)
		}
		return nil
	})
	// A plane made from nothing resets to the empty bootstrapped plane.
	plain := uniquePlane(t, "rs-plain")
	createPlane(t, s, plain, "")
	empty := planeState(t, s.Dynamic(t, plain))
	for episode := 1; episode <= 2; episode++ {
		seedScenario(t, s.Client(t, plain))
		if code := resetPlane(t, s, plain); code != http.StatusOK {
			t.Fatalf("reset %d of a plain plane: HTTP %d", episode, code)
		}
		if d := diffStates(empty, planeState(t, s.Dynamic(t, plain))); d != "" {
			t.Fatalf("a plain plane after reset %d differs from an empty one:\n%s", episode, d)
		}
	}
	// A used template cannot be reset.
	if code := resetPlane(t, s, tmpl); code != http.StatusForbidden {
		t.Fatalf("reset of a used template: HTTP %d, want 403", code)
	}
}

// TestTemplateMemberSurvivesKill: a member's changes and deletions of
// inherited objects survive kill -9 and restart, on SQLite and embedded
// etcd.
func TestTemplateMemberSurvivesKill(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{"sqlite": nil, "etcd": {"--datastore-endpoint", "etcd"}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			memberSurvivesKill(t, framework.StartServer(t, framework.Options{Args: args}))
		})
	}
}

func memberSurvivesKill(t *testing.T, s *framework.Server) {
	ctx := context.Background()
	createPlane(t, s, "tmpl", "")
	seedScenario(t, s.Client(t, "tmpl"))
	createPlane(t, s, "member", "tmpl")
	c := s.Client(t, "member")
	cm, err := c.CoreV1().ConfigMaps("shop").Get(ctx, "cm-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["v"] = "kept"
	if _, err := c.CoreV1().ConfigMaps("shop").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Secrets("shop").Delete(ctx, "s-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	before := planeState(t, s.Dynamic(t, "member"))
	// A clone is acknowledged once ready: it survives too.
	clonePlane(t, s, "clone", "member")
	s.Kill()
	s.Restart(t)
	for _, plane := range []string{"member", "clone"} {
		after := planeState(t, s.Dynamic(t, plane))
		if d := diffStates(before, after); d != "" {
			t.Fatalf("%s changed across kill -9:\n%s", plane, d)
		}
	}
}

// TestTemplateCRDsServeMembers: a member serves the custom resources of the
// CRDs it inherits, with its own changes on top.
func TestTemplateCRDsServeMembers(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	crdYAML, err := os.ReadFile("testdata/rayservices-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, member := uniquePlane(t, "crd-tmpl"), uniquePlane(t, "crd-member")
	createPlane(t, s, tmpl, "")
	s.MustKubectl(t, tmpl, string(crdYAML), "apply", "-f", "-")
	waitEstablished(t, s, tmpl, "rayservices.ray.example.com")
	for _, name := range []string{"one", "two", "three"} {
		if _, err := s.Dynamic(t, tmpl).Resource(rayGVR).Namespace("default").Create(ctx, rayService(name, "https://m.example.com/"+name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createPlane(t, s, member, tmpl)
	dm := s.Dynamic(t, member).Resource(rayGVR).Namespace("default")
	list, err := dm.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 3 {
		t.Fatalf("the member's inherited custom resources: %d, %v", len(list.Items), err)
	}
	if err := dm.Delete(ctx, "two", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting an inherited custom resource: %v", err)
	}
	if _, err := dm.Create(ctx, rayService("four", "https://m.example.com/four"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a custom resource in the member: %v", err)
	}
	patch := []byte(`{"spec":{"dag":{"source":"https://m.example.com/changed"}}}`)
	if _, err := dm.Patch(ctx, "one", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching an inherited custom resource: %v", err)
	}
	names := func(d dynamic.ResourceInterface) string {
		l, err := d.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, item := range l.Items {
			out = append(out, item.GetName())
		}
		return strings.Join(out, ",")
	}
	if got := names(dm); got != "four,one,three" {
		t.Fatalf("member's custom resources: %s", got)
	}
	if got := names(s.Dynamic(t, tmpl).Resource(rayGVR).Namespace("default")); got != "one,three,two" {
		t.Fatalf("the template's custom resources changed: %s", got)
	}
	if code := resetPlane(t, s, member); code != http.StatusOK {
		t.Fatalf("reset: HTTP %d", code)
	}
	if got := names(dm); got != "one,three,two" {
		t.Fatalf("member's custom resources after reset: %s", got)
	}
}

// TestFleetFromTemplate: every member of a Fleet with spec.template starts
// as the template's state, and the template is read-only while they exist.
func TestFleetFromTemplate(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	tmpl, fleetName := uniquePlane(t, "fleet-tmpl"), uniquePlane(t, "tfleet")
	createPlane(t, s, tmpl, "")
	seedScenario(t, s.Client(t, tmpl))
	s.MustKubectl(t, "root", fmt.Sprintf("apiVersion: kplane.dev/v1\nkind: Fleet\nmetadata:\n  name: %s\nspec:\n  replicas: 8\n  template: %s\n  deletionPolicy: Delete\n",
		fleetName, tmpl), "apply", "-f", "-")
	s.MustKubectl(t, "root", "", "wait", "fleet/"+fleetName, "--for=condition=Ready", "--timeout=60s")
	want := planeState(t, s.Dynamic(t, tmpl))
	for i := range 8 {
		member := fmt.Sprintf("%s-%04d", fleetName, i)
		if d := diffStates(want, planeState(t, s.Dynamic(t, member))); d != "" {
			t.Fatalf("fleet member %s differs from the template:\n%s", member, d)
		}
	}
	err := s.Client(t, tmpl).CoreV1().ConfigMaps("shop").Delete(ctx, "cm-0", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("deleting from a Fleet's template: want 403, got %v", err)
	}
}

// TestResetSurvivesKill: a server killed while a reset runs finishes it
// when it starts again: the plane is never left half reset.
func TestResetSurvivesKill(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	ctx := context.Background()
	createPlane(t, s, "tmpl", "")
	seedScenario(t, s.Client(t, "tmpl"))
	want := planeState(t, s.Dynamic(t, "tmpl"))
	createPlane(t, s, "member", "tmpl")
	d := s.Dynamic(t, "member")
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	for range 50 {
		randomOp(rng)(d)
	}
	changed := planeState(t, d)
	// Kill the server as soon as the reset is marked on the Plane.
	w, err := s.Dynamic(t, "root").Resource(planesGVR).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=member"})
	if err != nil {
		t.Fatal(err)
	}
	go postReset(s, "member") //nolint:errcheck // the server is killed under it
	for ev := range w.ResultChan() {
		if u, ok := ev.Object.(*unstructured.Unstructured); ok && u.GetAnnotations()["kplane.dev/resetting"] != "" {
			s.Kill()
			break
		}
	}
	w.Stop()
	s.Restart(t)
	framework.Eventually(t, framework.DefaultTimeout, "the interrupted reset finished", func(ctx context.Context) error {
		p, err := s.Dynamic(t, "root").Resource(planesGVR).Get(ctx, "member", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.GetAnnotations()["kplane.dev/resetting"] != "" {
			return fmt.Errorf("still marked")
		}
		return nil
	})
	got := planeState(t, s.Dynamic(t, "member"))
	if diffStates(want, got) != "" && diffStates(changed, got) != "" {
		t.Fatalf("after kill -9 in a reset the member is neither reset nor untouched:\n%s", diffStates(want, got))
	}
	if d := diffStates(want, got); d != "" {
		t.Fatalf("the reset was marked before the kill, so it must be finished:\n%s", d)
	}
}

// TestPlaneRecreatedAtOnce: a plane created again the moment its Plane is
// gone serves requests (it used to stay closed, 409, when the new Plane
// was seen before the deletion was forgotten).
func TestPlaneRecreatedAtOnce(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	name := uniquePlane(t, "again")
	planesAPI := s.Dynamic(t, "root").Resource(planesGVR)
	for range 5 {
		createPlane(t, s, name, "")
		if err := planesAPI.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, framework.DefaultTimeout, "the Plane gone", func(ctx context.Context) error {
			if _, err := planesAPI.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there: %v", err)
			}
			return nil
		})
	}
	createPlane(t, s, name, "")
	framework.Eventually(t, framework.DefaultTimeout, "the plane created again serves writes", func(ctx context.Context) error {
		_, err := s.Client(t, name).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "x-"}}, metav1.CreateOptions{})
		return err
	})
}

// TestTemplateGarbageCollection: a member's deletion of an inherited owner
// collects the dependents it inherits, in that member only.
func TestTemplateGarbageCollection(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	tmpl, a, b := uniquePlane(t, "gc-tmpl"), uniquePlane(t, "gc-a"), uniquePlane(t, "gc-b")
	createPlane(t, s, tmpl, "")
	ownerWithDependents(t, s.Client(t, tmpl), 2)
	createPlane(t, s, a, tmpl)
	createPlane(t, s, b, tmpl)
	ca := s.Client(t, a)
	if err := ca.CoreV1().ConfigMaps("default").Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "inherited dependents collected in "+a, func(ctx context.Context) error {
		for _, name := range []string{"dep-0", "dep-1"} {
			if _, err := ca.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s: %v", name, err)
			}
		}
		return nil
	})
	for _, plane := range []string{tmpl, b} {
		for _, name := range []string{"owner", "dep-0", "dep-1"} {
			if _, err := s.Client(t, plane).CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Fatalf("%s lost %s when %s deleted its owner: %v", plane, name, a, err)
			}
		}
	}
}

// TestMemberDeltaStream: a member's snapshot delta stream tells changes of
// inherited objects as a copy's would: an inherited object's deletion is
// DELETED, its first change MODIFIED.
func TestMemberDeltaStream(t *testing.T) {
	t.Parallel()
	s := shared
	tmpl, member := uniquePlane(t, "delta-tmpl"), uniquePlane(t, "delta-member")
	createPlane(t, s, tmpl, "")
	seedScenario(t, s.Client(t, tmpl))
	createPlane(t, s, member, tmpl)
	mustSnapshot(t, member, "warm=true")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, events, errs := streamFromFreshSnapshot(t, ctx, member)
	c := s.Client(t, member)
	if err := c.CoreV1().ConfigMaps("shop").Delete(ctx, "cm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps("shop").Patch(ctx, "cm-1", types.MergePatchType, []byte(`{"data":{"v":"changed"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-0", Namespace: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"DELETED cm-0", "MODIFIED cm-1", "ADDED cm-0"}
	var got []string
	deadline := time.After(framework.DefaultTimeout)
	for len(got) < len(want) {
		select {
		case ev := <-events:
			if ev.Resource != "configmaps" {
				continue
			}
			md, _ := ev.Object["metadata"].(map[string]any)
			if annotations, _ := md["annotations"].(map[string]any); annotations["kplane.dev/layer"] != nil {
				t.Fatalf("the stream shows a layer record: %v", md)
			}
			got = append(got, fmt.Sprintf("%s %v", ev.Type, md["name"]))
		case err := <-errs:
			t.Fatal(err)
		case <-deadline:
			t.Fatalf("stream events %v, want %v", got, want)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("stream events %v, want %v", got, want)
	}
}

// TestMemberServiceIPs: a member never hands out the ClusterIP of a
// Service it inherits. The range is small enough that an allocator that
// ignored the template's Services would collide.
func TestMemberServiceIPs(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{Args: []string{"--service-cidr", "10.97.0.0/29"}})
	ctx := context.Background()
	createPlane(t, s, "tmpl", "")
	taken := map[string]string{"10.97.0.1": "kubernetes"}
	create := func(plane, name string) (*corev1.Service, error) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		return s.Client(t, plane).CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	}
	// Six addresses (.1 to .6), .1 the kubernetes Service's: the template
	// takes four of the other five.
	for i := range 4 {
		got, err := create("tmpl", fmt.Sprintf("t-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		taken[got.Spec.ClusterIP] = got.Name
	}
	createPlane(t, s, "member", "tmpl")
	got, err := create("member", "m-0")
	if err != nil {
		t.Fatalf("the member's Service in the one address left: %v", err)
	}
	if other, dup := taken[got.Spec.ClusterIP]; dup {
		t.Fatalf("the member gave m-0 the ClusterIP %s of %s, which it inherits", got.Spec.ClusterIP, other)
	}
	if _, err := create("member", "m-1"); err == nil {
		t.Fatal("the member allocated a seventh address from a range of six")
	}
}

// TestResetKeepsPlaneCredential: a kubeconfig `kplane kubeconfig` handed
// out for a plane (to an agent, say) works across the plane's resets; the
// episode's own objects go, and a binding the episode widened goes too.
func TestResetKeepsPlaneCredential(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	plane := uniquePlane(t, "rs-cred")
	createPlane(t, s, plane, "")
	c := clientWithToken(t, s, plane, planeToken(t, s, plane))
	for episode := 1; episode <= 2; episode++ {
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "episode"}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("episode %d, through the handed-out credential: %v", episode, err)
		}
		if code := resetPlane(t, s, plane); code != http.StatusOK {
			t.Fatalf("episode %d: reset: HTTP %d", episode, code)
		}
		if _, err := c.CoreV1().ConfigMaps("default").Get(ctx, "episode", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("after reset %d, through the handed-out credential: %v, want 404", episode, err)
		}
	}
	// An episode that widens the binding does not carry it into the next.
	widen := []byte(`[{"op":"add","path":"/subjects/-","value":{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"system:serviceaccounts"}}]`)
	if _, err := c.RbacV1().ClusterRoleBindings().Patch(ctx, "kplane-admin", types.JSONPatchType, widen, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := resetPlane(t, s, plane); code != http.StatusOK {
		t.Fatalf("reset: HTTP %d", code)
	}
	if _, err := s.Client(t, plane).RbacV1().ClusterRoleBindings().Get(ctx, "kplane-admin", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the widened binding after the reset: %v, want 404", err)
	}
	if _, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the credential without its binding: %v, want 403", err)
	}
	// `kplane kubeconfig` makes the binding again.
	c = clientWithToken(t, s, plane, planeToken(t, s, plane))
	if _, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestWritesRightAfterReset: the writes that follow a reset at once, while
// the watch caches may still hold the records it removed, see the
// template's state. An inherited object the member had changed or deleted
// updates from the template's version (not 404, not a conflict with the
// removed copy); a name the member had created can be created again; a
// name the template shows cannot.
func TestWritesRightAfterReset(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	tmpl, member := uniquePlane(t, "ar-tmpl"), uniquePlane(t, "ar-member")
	createPlane(t, s, tmpl, "")
	tc := s.Client(t, tmpl)
	if _, err := tc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"changed", "deleted"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "template"}}
		if _, err := tc.CoreV1().ConfigMaps("shop").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Inherited objects keep the template's resourceVersion: an update
	// sent right after the reset, with no read in between, names it.
	inherited := map[string]*corev1.ConfigMap{}
	for _, name := range []string{"changed", "deleted"} {
		cm, err := tc.CoreV1().ConfigMaps("shop").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inherited[name] = cm
	}
	createPlane(t, s, member, tmpl)
	cms := s.Client(t, member).CoreV1().ConfigMaps("shop")
	update := func(round int, name, value string) {
		t.Helper()
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("round %d: get %s: %v", round, name, err)
		}
		cm.Data = map[string]string{"v": value}
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("round %d: update %s: %v", round, name, err)
		}
	}
	for round := 1; round <= 30; round++ {
		update(round, "changed", "episode")
		if err := cms.Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("round %d: delete: %v", round, err)
		}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "created"}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("round %d: create: %v", round, err)
		}
		if code := resetPlane(t, s, member); code != http.StatusOK {
			t.Fatalf("round %d: reset: HTTP %d", round, code)
		}
		for _, name := range []string{"deleted", "changed"} {
			cm := inherited[name].DeepCopy()
			cm.Data = map[string]string{"v": "after reset"}
			if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("round %d: update of %s right after the reset: %v", round, name, err)
			}
		}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "created"}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("round %d: create again after the reset: %v", round, err)
		}
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "deleted"}}, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			t.Fatalf("round %d: create of a name the template shows: %v, want AlreadyExists", round, err)
		}
		// The next round starts from the template's state again.
		if code := resetPlane(t, s, member); code != http.StatusOK {
			t.Fatalf("round %d: second reset: HTTP %d", round, code)
		}
		for _, name := range []string{"changed", "deleted"} {
			if cm, err := cms.Get(ctx, name, metav1.GetOptions{}); err != nil || cm.Data["v"] != "template" {
				t.Fatalf("round %d: %s after the reset: %v %v, want the template's", round, name, cm.Data, err)
			}
		}
	}
	if got, err := tc.CoreV1().ConfigMaps("shop").Get(ctx, "changed", metav1.GetOptions{}); err != nil || got.Data["v"] != "template" {
		t.Fatalf("the template changed: %v %v", got.Data, err)
	}
}

// A request held by a reset is admitted against the plane as the reset
// left it, not as the server's caches saw it before: ConfigMaps created
// in a namespace of the episode before, during and after the reset are
// either wiped with it or refused once the namespace is gone. None
// survives in the namespace the reset deleted (NamespaceLifecycle looks
// in the cache first, which must have seen the reset by then).
func TestRequestsHeldByResetSeeItsEnd(t *testing.T) {
	t.Parallel()
	tmpl, member := uniquePlane(t, "hr-tmpl"), uniquePlane(t, "hr-member")
	createPlane(t, shared, tmpl, "")
	createPlane(t, shared, member, tmpl)
	requestsHeldByResetSeeItsEnd(t, shared, shared, member, 20)
}

// The same across two servers on one etcd: the writers' server holds the
// plane for the other server's reset, and lets their requests in only
// once its own caches have seen the reset's deletions.
func TestRequestsHeldByResetAcrossServersSeeItsEnd(t *testing.T) {
	t.Parallel()
	resetting, writing := startTwoServers(t, framework.StartEtcd(t), "--simulation=false")
	tmpl, member := "hr-across-tmpl", "hr-across-member"
	createPlane(t, resetting, tmpl, "")
	createPlane(t, resetting, member, tmpl)
	requestsHeldByResetSeeItsEnd(t, resetting, writing, member, 10)
}

// requestsHeldByResetSeeItsEnd resets plane through resetting, rounds
// times, while writers create ConfigMaps in a namespace of the episode
// through writing, and fails if any survives a reset.
func requestsHeldByResetSeeItsEnd(t *testing.T, resetting, writing *framework.Server, member string, rounds int) {
	ctx := context.Background()
	c := writing.Client(t, member)
	const writers = 4
	for round := 1; round <= rounds; round++ {
		ns := fmt.Sprintf("episode-%d", round)
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var attempts atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w%d-%d", w, i)}}
					// Refused once the namespace is gone: what counts is what
					// is left after the reset.
					_, _ = c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
					attempts.Add(1)
				}
			})
		}
		framework.Eventually(t, framework.DefaultTimeout, "writers under way", func(context.Context) error {
			if attempts.Load() < writers {
				return fmt.Errorf("%d creates so far", attempts.Load())
			}
			return nil
		})
		if code := resetPlane(t, resetting, member); code != http.StatusOK {
			close(stop)
			wg.Wait()
			t.Fatalf("round %d: reset: HTTP %d", round, code)
		}
		// Every writer's request that the reset held has been answered by
		// the time each writer sent a few more.
		after := attempts.Load()
		framework.Eventually(t, framework.DefaultTimeout, "creates after the reset", func(context.Context) error {
			if attempts.Load() < after+4*writers {
				return fmt.Errorf("%d creates since the reset", attempts.Load()-after)
			}
			return nil
		})
		close(stop)
		wg.Wait()
		left, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(left.Items) > 0 {
			t.Fatalf("round %d: %d ConfigMaps (%s, ...) survive in namespace %s, which the reset deleted",
				round, len(left.Items), left.Items[0].Name, ns)
		}
	}
}

// A reset that comes while a namespace the plane inherited is being
// deleted gives the namespace back whole: Active, with its finalizer and
// its content. The namespace controller finalizes the deleted copy around
// the reset; the restored namespace has the same uid, and neither that
// finalize nor a deletion of content decided before the reset may reach
// it. Each round releases the content that held the deletion and resets
// at once, so that the controller's last steps and the reset interleave
// differently from round to round.
func TestResetDuringNamespaceDeletion(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	plane := uniquePlane(t, "ns-reset")
	createPlane(t, s, plane, "")
	c := s.Client(t, plane)
	for round := 1; round <= 20; round++ {
		held := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}
		if _, err := c.CoreV1().ConfigMaps("kube-node-lease").Create(ctx, held, metav1.CreateOptions{}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if err := c.CoreV1().Namespaces().Delete(ctx, "kube-node-lease", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		framework.Eventually(t, framework.DefaultTimeout, "kube-node-lease waiting for its content", func(ctx context.Context) error {
			ns, err := c.CoreV1().Namespaces().Get(ctx, "kube-node-lease", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range ns.Status.Conditions {
				if cond.Type == corev1.NamespaceContentRemaining && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("conditions %v", ns.Status.Conditions)
		})
		released := make(chan error, 1)
		go func() {
			_, err := c.CoreV1().ConfigMaps("kube-node-lease").Patch(ctx, "held", types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			released <- err
		}()
		if code := resetPlane(t, s, plane); code != http.StatusOK {
			t.Fatalf("round %d: reset: HTTP %d", round, code)
		}
		// Released before the reset, or gone with it.
		if err := <-released; err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("round %d: releasing the content: %v", round, err)
		}
		framework.Consistently(t, time.Second, fmt.Sprintf("round %d: kube-node-lease as the template has it", round), func(ctx context.Context) error {
			ns, err := c.CoreV1().Namespaces().Get(ctx, "kube-node-lease", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ns.Status.Phase != corev1.NamespaceActive || len(ns.Spec.Finalizers) != 1 || ns.Spec.Finalizers[0] != corev1.FinalizerKubernetes {
				return fmt.Errorf("phase %s, finalizers %v", ns.Status.Phase, ns.Spec.Finalizers)
			}
			_, err = c.CoreV1().ConfigMaps("kube-node-lease").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err
		})
	}
}

// A reset that comes while the garbage collector deletes the dependents
// of an owner the member deleted gives back owner and dependents: the
// collector's deletion, decided before the reset, may not reach the
// restored dependents, which have the uids and resourceVersions it names.
// Each round deletes the owner and resets at once.
func TestResetDuringGarbageCollection(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	tmpl, member := uniquePlane(t, "gcr-tmpl"), uniquePlane(t, "gcr-member")
	createPlane(t, s, tmpl, "")
	names := append([]string{"owner"}, ownerWithDependents(t, s.Client(t, tmpl), 5)...)
	createPlane(t, s, member, tmpl)
	cms := s.Client(t, member).CoreV1().ConfigMaps("default")
	for round := 1; round <= 20; round++ {
		if err := cms.Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if code := resetPlane(t, s, member); code != http.StatusOK {
			t.Fatalf("round %d: reset: HTTP %d", round, code)
		}
		framework.Consistently(t, time.Second, fmt.Sprintf("round %d: owner and dependents as the template has them", round), func(ctx context.Context) error {
			for _, name := range names {
				if _, err := cms.Get(ctx, name, metav1.GetOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// ownerWithDependents creates ConfigMap owner in namespace default of c's
// plane and n ConfigMaps it owns (dep-0, ...), and returns their names.
func ownerWithDependents(t *testing.T, c kubernetes.Interface, n int) []string {
	t.Helper()
	ctx := context.Background()
	owner, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}
	var names []string
	for i := range n {
		dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dep-%d", i), OwnerReferences: []metav1.OwnerReference{ref}}}
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, dep.Name)
	}
	return names
}

// TestMemberSeesTemplatesLastWrite: a member made the moment after its
// template's last write reads that write at once, in a list (from the
// watch cache) as in a get, as a copy made then would hold it.
func TestMemberSeesTemplatesLastWrite(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	tmpl := uniquePlane(t, "last-tmpl")
	createPlane(t, s, tmpl, "")
	ct := s.Client(t, tmpl)
	planesClient := s.Dynamic(t, "root").Resource(planesGVR)
	for round := 0; round < 20; round++ {
		name := fmt.Sprintf("last-%d", round)
		if _, err := ct.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		member := uniquePlane(t, fmt.Sprintf("last-m%d", round))
		if _, err := planesClient.Create(ctx, newPlane(member, map[string]any{"template": tmpl}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cm := s.Client(t, member).CoreV1().ConfigMaps("default")
		list, err := cm.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != round+2 { // kube-root-ca.crt and every round's
			t.Fatalf("round %d: member %s lists %d ConfigMaps, its template holds %d", round, member, len(list.Items), round+2)
		}
		if _, err := cm.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("round %d: member %s: %v", round, member, err)
		}
		// Unfreeze the template for the next round's write.
		if err := planesClient.Delete(ctx, member, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, framework.DefaultTimeout, "member "+member, func() error {
			_, err := planesClient.Get(ctx, member, metav1.GetOptions{})
			return err
		})
	}
}
