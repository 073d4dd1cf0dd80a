package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"kplane.dev/kplane/test/e2e/framework"
)

// crdSpec is a CRD of group example.org with one object-typed schema per
// version (the first version stored).
func crdSpec(plural, kind string, scope apiextensionsv1.ResourceScope, schema *apiextensionsv1.JSONSchemaProps, versions ...string) *apiextensionsv1.CustomResourceDefinition {
	return crdInGroup("example.org", plural, kind, scope, schema, versions...)
}

func crdInGroup(group, plural, kind string, scope apiextensionsv1.ResourceScope, schema *apiextensionsv1.JSONSchemaProps, versions ...string) *apiextensionsv1.CustomResourceDefinition {
	if schema == nil {
		schema = &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTo(true)}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group,
			Annotations: map[string]string{"api-approved.kubernetes.io": "unapproved, test"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: scope,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List"},
		},
	}
	for i, v := range versions {
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: v, Served: true, Storage: i == 0,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: schema.DeepCopy()},
		})
	}
	return crd
}

func ptrTo[T any](v T) *T { return &v }

func createEstablished(ctx context.Context, t *testing.T, s *framework.Server, plane string, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	c := apiextensionsclient.NewForConfigOrDie(s.RESTConfig(plane))
	if _, err := c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating CRD %s in %s: %v", crd.Name, plane, err)
	}
	framework.Eventually(t, framework.DefaultTimeout, fmt.Sprintf("CRD %s established in %s", crd.Name, plane), func(ctx context.Context) error {
		got, err := c.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return errors.New("not established")
	})
}

func gizmo(name, namespace string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.org/v1", "kind": "Gizmo",
		"metadata": map[string]any{"name": name}, "spec": spec}}
	if namespace != "" {
		u.SetNamespace(namespace)
	}
	return u
}

// TestCRDInBuiltinGroupRefused: a CRD in a group the server serves itself
// is refused in every plane (defect 1: it replaced built-in storage for
// every plane). kplane's own group is reserved in the root plane only.
func TestCRDInBuiltinGroupRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := uniquePlane(t, "builtin-crd")
	cases := []struct {
		plane               string
		group, plural, kind string
	}{
		{a, "rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding"},
		{a, "rbac.authorization.k8s.io", "clusterroles", "ClusterRole"},
		{a, "scheduling.k8s.io", "priorityclasses", "PriorityClass"},
		{a, "apiextensions.k8s.io", "customresourcedefinitions", "CustomResourceDefinition"},
		{a, "apps", "gadgets", "Gadget"},
		{a, "", "gadgets", "Gadget"},
		{"root", "kplane.dev", "gadgets", "Gadget"},
		{"root", "rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding"},
	}
	for _, c := range cases {
		crd := crdInGroup(c.group, c.plural, c.kind, apiextensionsv1.ClusterScoped, nil, "v1")
		client := apiextensionsclient.NewForConfigOrDie(shared.RESTConfig(c.plane))
		_, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
		if c.group == "" {
			// The core group has no name: upstream validation refuses it.
			if !apierrors.IsInvalid(err) {
				t.Errorf("%s in %s: want 422, got %v", crd.Name, c.plane, err)
			}
			continue
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.group") || !strings.Contains(err.Error(), c.group) {
			t.Errorf("%s in %s: want 422 naming spec.group, got %v", crd.Name, c.plane, err)
		}
	}
	// kplane.dev is only reserved in root: a plane may define it.
	createEstablished(ctx, t, shared, a, crdInGroup("kplane.dev", "gadgets", "Gadget", apiextensionsv1.ClusterScoped, nil, "v1"))

	// Built-in RBAC keeps working in another plane and in root.
	b := uniquePlane(t, "builtin-crd-other")
	for _, plane := range []string{b, "root"} {
		for i := 0; i < 20; i++ {
			if _, err := shared.Client(t, plane).CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
				t.Fatalf("list namespaces in %s: %v", plane, err)
			}
			if _, err := shared.Client(t, plane).RbacV1().ClusterRoleBindings().Get(ctx, "cluster-admin", metav1.GetOptions{}); err != nil {
				t.Fatalf("get clusterrolebinding in %s: %v", plane, err)
			}
		}
	}
}

// TestCRDScopeIsPerPlane: one plane's CRD scope does not decide another
// plane's cache (defect 2). A holds gizmos Cluster-scoped, B Namespaced:
// B behaves as if A did not exist.
func TestCRDScopeIsPerPlane(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b := uniquePlane(t, "scope-a"), uniquePlane(t, "scope-b")
	gvr := schema.GroupVersionResource{Group: "example.org", Version: "v1", Resource: "gizmos"}

	createEstablished(ctx, t, shared, a, crdSpec("gizmos", "Gizmo", apiextensionsv1.ClusterScoped, nil, "v1"))
	da := shared.Dynamic(t, a).Resource(gvr)
	if _, err := da.Create(ctx, gizmo("x", "", map[string]any{"in": "a"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := da.List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
		t.Fatal(err)
	}

	createEstablished(ctx, t, shared, b, crdSpec("gizmos", "Gizmo", apiextensionsv1.NamespaceScoped, nil, "v1"))
	db := shared.Dynamic(t, b).Resource(gvr)
	cb := shared.Client(t, b)
	if _, err := cb.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := db.Namespace("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, ns := range []string{"default", "kube-system", "doomed"} {
		if _, err := db.Namespace(ns).Create(ctx, gizmo("x", ns, map[string]any{"in": "b"}), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s/x in %s: %v", ns, b, err)
		}
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added || ev.Object.(*unstructured.Unstructured).GetNamespace() != "default" {
			t.Fatalf("watch of default in %s: %v %v", b, ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("watch of default in %s is silent", b)
	}
	framework.Eventually(t, framework.DefaultTimeout, "three gizmos in the cached list of "+b, func(ctx context.Context) error {
		l, err := db.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return countIs(l, err, 3)
	})
	if got, err := db.Namespace("default").Get(ctx, "x", metav1.GetOptions{}); err != nil || got.Object["spec"].(map[string]any)["in"] != "b" {
		t.Fatalf("get default/x in %s: %v %v", b, got, err)
	}
	snap := snapshotItems(t, b, "gizmos.example.org")
	if snap != 3 {
		t.Errorf("snapshot of %s holds %d gizmos, want 3", b, snap)
	}

	// Namespace deletion removes B's gizmo for good.
	if err := cb.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "namespace doomed gone", func(ctx context.Context) error {
		_, err := cb.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		return notFound(err)
	})
	if _, err := cb.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if l, err := db.Namespace("doomed").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("recreated namespace holds %v (%v)", l, err)
	}

	// A is untouched.
	l, err := da.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil || len(l.Items) != 1 || l.Items[0].Object["spec"].(map[string]any)["in"] != "a" {
		t.Fatalf("A's gizmos: %v (%v)", l, err)
	}
}

// snapshotItems counts the items of resource in plane's snapshot.
func snapshotItems(t *testing.T, plane, resource string) int {
	t.Helper()
	var snap struct {
		Resources []struct {
			Items []json.RawMessage `json:"items"`
		} `json:"resources"`
	}
	getJSON(t, plane, "/snapshot?resource="+resource+"&warm=true", &snap)
	n := 0
	for _, r := range snap.Resources {
		n += len(r.Items)
	}
	return n
}

// TestCRDVersionsAndDefaultsArePerPlane: planes whose CRDs of one resource
// differ in versions or schema each read their objects by their own CRD;
// objects stored in a version another plane's CRD does not know do not
// break that plane's cache; a default added to the schema applies to
// objects read back from storage (conformance: defaulting from storage).
func TestCRDVersionsAndDefaultsArePerPlane(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b := uniquePlane(t, "versions-a"), uniquePlane(t, "versions-b")
	schemaOf := func(def string) *apiextensionsv1.JSONSchemaProps {
		color := apiextensionsv1.JSONSchemaProps{Type: "string"}
		if def != "" {
			color.Default = &apiextensionsv1.JSON{Raw: []byte(`"` + def + `"`)}
		}
		return &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"color": color, "size": {Type: "integer"}}},
		}}
	}
	gvr := schema.GroupVersionResource{Group: "example.org", Version: "v1", Resource: "widgets"}
	// A serves v1 only; B stores v2 and also serves v1.
	createEstablished(ctx, t, shared, a, crdSpec("widgets", "Widget", apiextensionsv1.NamespaceScoped, schemaOf(""), "v1"))
	createEstablished(ctx, t, shared, b, crdSpec("widgets", "Widget", apiextensionsv1.NamespaceScoped, schemaOf(""), "v2", "v1"))
	da := shared.Dynamic(t, a).Resource(gvr).Namespace("default")
	db := shared.Dynamic(t, b).Resource(gvr.GroupResource().WithVersion("v2")).Namespace("default")
	widget := func(v, name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.org/" + v, "kind": "Widget",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"size": int64(1)}}}
	}
	if _, err := da.Create(ctx, widget("v1", "w1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := da.List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
		t.Fatal(err)
	}
	// B writes objects stored as v2, which A's CRD cannot decode.
	for i := 0; i < 3; i++ {
		if _, err := db.Create(ctx, widget("v2", fmt.Sprintf("b%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A's cache still follows A.
	if _, err := da.Create(ctx, widget("v1", "w2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "A's cached list to hold w1 and w2", func(ctx context.Context) error {
		l, err := da.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return countIs(l, err, 2)
	})
	framework.Eventually(t, framework.DefaultTimeout, "B's cached list to hold its three widgets", func(ctx context.Context) error {
		l, err := db.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return countIs(l, err, 3)
	})

	// A's schema gains a default: A's stored objects read back defaulted,
	// B's (same resource, its own CRD) do not.
	client := apiextensionsclient.NewForConfigOrDie(shared.RESTConfig(a))
	crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "widgets.example.org", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crd.Spec.Versions[0].Schema.OpenAPIV3Schema = schemaOf("blue")
	if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "A's stored widgets read back defaulted", func(ctx context.Context) error {
		for _, rv := range []string{"", "0"} {
			l, err := da.List(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err := countIs(l, err, 2); err != nil {
				return err
			}
			for _, item := range l.Items {
				if c, _, _ := unstructured.NestedString(item.Object, "spec", "color"); c != "blue" {
					return fmt.Errorf("%s (rv=%q) has color %q", item.GetName(), rv, c)
				}
			}
		}
		return nil
	})
	l, err := db.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range l.Items {
		if _, found, _ := unstructured.NestedString(item.Object, "spec", "color"); found {
			t.Errorf("B's widget %s got A's default", item.GetName())
		}
	}
}

// TestCustomResourceProtobufBody: a protobuf body to a custom-resource
// endpoint answers 415 like upstream (defect 4: it panicked).
func TestCustomResourceProtobufBody(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plane := uniquePlane(t, "protobuf-cr")
	createEstablished(ctx, t, shared, plane, crdSpec("gizmos", "Gizmo", apiextensionsv1.NamespaceScoped, nil, "v1"))
	url := shared.PlaneURL(plane) + "/apis/example.org/v1/namespaces/default/gizmos"
	for _, method := range []string{http.MethodPost, http.MethodPut} {
		target := url
		if method == http.MethodPut {
			target += "/x"
		}
		req, _ := http.NewRequestWithContext(ctx, method, target, bytes.NewReader([]byte("k8s\x00\x0a\x0b\x0a\x07example")))
		req.Header.Set("Authorization", "Bearer "+shared.AdminToken())
		req.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf")
		resp, err := shared.HTTPClient().Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var status metav1.Status
		if resp.StatusCode != http.StatusUnsupportedMediaType || json.Unmarshal(body, &status) != nil || status.Code != http.StatusUnsupportedMediaType {
			t.Errorf("%s with a protobuf body: %d %s", method, resp.StatusCode, body)
		}
	}
}

// TestCRDChurnLeavesNothing: CRDs created, served and deleted leave no
// goroutine behind (defect 8: the object counters of a released
// custom-resource storage retried forever). The memory side is measured
// over 1,000 cycles by `scripts/bench --scenarios crd-churn`.
func TestCRDChurnLeavesNothing(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	plane := "churn"
	// A new resource each cycle: every cycle builds a storage of its own,
	// which goes once its CRD is gone.
	cycle := func(i int) {
		plural, kind := fmt.Sprintf("gizmo%ds", i), fmt.Sprintf("Gizmo%d", i)
		gvr := schema.GroupVersionResource{Group: "example.org", Version: "v1", Resource: plural}
		crd := crdSpec(plural, kind, apiextensionsv1.NamespaceScoped, nil, "v1")
		createEstablished(ctx, t, s, plane, crd)
		d := s.Dynamic(t, plane).Resource(gvr).Namespace("default")
		framework.Eventually(t, framework.DefaultTimeout, "a gizmo created", func(ctx context.Context) error {
			g := gizmo("g", "default", nil)
			g.SetKind(kind)
			_, err := d.Create(ctx, g, metav1.CreateOptions{})
			return err
		})
		if _, err := d.List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
			t.Fatal(err)
		}
		c := apiextensionsclient.NewForConfigOrDie(s.RESTConfig(plane)).ApiextensionsV1().CustomResourceDefinitions()
		if err := c.Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, framework.DefaultTimeout, "the CRD gone", func(ctx context.Context) error {
			_, err := c.Get(ctx, crd.Name, metav1.GetOptions{})
			return notFound(err)
		})
	}
	goroutines := func() float64 {
		return scrape(t, s)["go_goroutines"].GetMetric()[0].GetGauge().GetValue()
	}
	for i := 0; i < 5; i++ {
		cycle(i)
	}
	before := goroutines()
	const cycles = 60
	for i := 5; i < 5+cycles; i++ {
		cycle(i)
	}
	// Storages are torn down once their last requests are done: give the
	// count a moment to come back, but it must come back.
	framework.Eventually(t, framework.DefaultTimeout, "goroutines back", func(context.Context) error {
		if after := goroutines(); after > before+cycles/4 {
			return fmt.Errorf("%v before %d CRD cycles, %v after", before, cycles, after)
		}
		return nil
	})
}

// countIs says whether a list call returned n items.
func countIs(l *unstructured.UnstructuredList, err error, n int) error {
	if err != nil {
		return err
	}
	if len(l.Items) != n {
		return fmt.Errorf("%d items, want %d", len(l.Items), n)
	}
	return nil
}

// notFound turns "the object is gone" into success.
func notFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		return errors.New("still there")
	}
	return err
}
