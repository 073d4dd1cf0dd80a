package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"kplane.dev/kplane/test/e2e/framework"
)

var rayGVR = schema.GroupVersionResource{Group: "ray.example.com", Version: "v1", Resource: "rayservices"}

func rayService(name, source string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.example.com/v1", "kind": "RayService",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{"dag": map[string]any{"source": source,
			"deployments": []any{map[string]any{"name": "router", "rayActorOptions": map[string]any{"num_cpus": 0.5}}}}},
	}}
}

func waitEstablished(t *testing.T, s *framework.Server, plane, crd string) {
	t.Helper()
	framework.Eventually(t, framework.DefaultTimeout, "CRD "+crd+" established in "+plane, func(context.Context) error {
		out, err := s.Kubectl(t, plane, "", "get", "crd", crd, "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`)
		if out != "True" {
			return fmt.Errorf("Established=%q (%v)", out, err)
		}
		return nil
	})
}

// TestCustomResourceDefinitions: a CRD belongs to its plane; its custom
// resources are validated, defaulted and pruned by its schema, with status
// and scale subresources, printer columns, server-side apply and watch;
// other planes do not see it; conditions are real; deleting the CRD deletes
// its resources; everything survives a restart.
func TestCustomResourceDefinitions(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	crdYAML, err := os.ReadFile("testdata/rayservices-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, b := "crd-a", "crd-b"
	s.MustKubectl(t, a, string(crdYAML), "apply", "-f", "-")
	waitEstablished(t, s, a, "rayservices.ray.example.com")
	da := s.Dynamic(t, a).Resource(rayGVR).Namespace("default")

	// Watch first, then create: defaulting, pruning, validation.
	w, err := da.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	rs := rayService("serve", "https://models.example.com/dag.pb")
	rs.Object["spec"].(map[string]any)["unknownField"] = "pruned"
	created, err := da.Create(ctx, rs, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if v, _, _ := unstructured.NestedInt64(created.Object, "spec", "workers", "replicas"); v != 2 {
		t.Errorf("default workers.replicas: %v", v)
	}
	if v, _, _ := unstructured.NestedString(created.Object, "spec", "workers", "gpu"); v != "none" {
		t.Errorf("default workers.gpu: %q", v)
	}
	deps, _, _ := unstructured.NestedSlice(created.Object, "spec", "dag", "deployments")
	if len(deps) != 1 || deps[0].(map[string]any)["numReplicas"] != int64(1) {
		t.Errorf("defaulted list item: %v", deps)
	}
	if opts := deps[0].(map[string]any)["rayActorOptions"].(map[string]any); opts["num_cpus"] != 0.5 {
		t.Errorf("x-kubernetes-preserve-unknown-fields dropped data: %v", opts)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(created.Object, "spec", "unknownField"); found {
		t.Error("unknown field was not pruned")
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added {
			t.Fatalf("watch: %v", ev.Type)
		}
	case <-time.After(framework.DefaultTimeout):
		t.Fatal("no watch event for the created resource")
	}
	for _, bad := range []*unstructured.Unstructured{
		rayService("bad-source", "http://insecure"),
		func() *unstructured.Unstructured {
			r := rayService("bad-gpu", "https://x")
			r.Object["spec"].(map[string]any)["workers"] = map[string]any{"gpu": "tpu"}
			return r
		}(),
	} {
		if _, err := da.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("%s: want Invalid, got %v", bad.GetName(), err)
		}
	}

	// Patch, status and scale subresources, printer columns.
	if _, err := da.Patch(ctx, "serve", types.MergePatchType, []byte(`{"spec":{"workers":{"replicas":4}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := da.Patch(ctx, "serve", types.MergePatchType, []byte(`{"status":{"phase":"Running","readyWorkers":3},"spec":{"workers":{"replicas":9}}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	got, _ := da.Get(ctx, "serve", metav1.GetOptions{})
	if r, _, _ := unstructured.NestedInt64(got.Object, "spec", "workers", "replicas"); r != 4 {
		t.Errorf("status subresource changed spec: replicas=%d", r)
	}
	scale, err := da.Get(ctx, "serve", metav1.GetOptions{}, "scale")
	if err != nil || scale.GetKind() != "Scale" {
		t.Fatalf("scale subresource: %v %v", err, scale)
	}
	if r, _, _ := unstructured.NestedInt64(scale.Object, "status", "replicas"); r != 3 {
		t.Errorf("scale status.replicas: %d", r)
	}
	out := s.MustKubectl(t, a, "", "scale", "rayservice/serve", "--replicas=6")
	if !strings.Contains(out, "scaled") {
		t.Errorf("kubectl scale: %s", out)
	}
	out = s.MustKubectl(t, a, "", "get", "rsvc")
	if !strings.Contains(out, "PHASE") || !strings.Contains(out, "Running") || !strings.Contains(out, "6") {
		t.Errorf("printer columns / short name: %s", out)
	}
	out = s.MustKubectl(t, a, "", "get", "ray")
	if !strings.Contains(out, "serve") {
		t.Errorf("category: %s", out)
	}
	out = s.MustKubectl(t, a, "", "explain", "rayservice.spec.workers.gpu")
	if !strings.Contains(out, "h100") {
		t.Errorf("kubectl explain: %s", out)
	}
	applied := `apiVersion: ray.example.com/v1
kind: RayService
metadata: {name: applied, namespace: default}
spec:
  dag: {source: "https://a.example.com/dag"}
  workers: {replicas: 1}
`
	if out := s.MustKubectl(t, a, applied, "apply", "--server-side", "-f", "-"); !strings.Contains(out, "serverside-applied") {
		t.Errorf("server-side apply: %s", out)
	}
	// A second version with None conversion serves the same objects.
	alpha := s.Dynamic(t, a).Resource(schema.GroupVersionResource{Group: "ray.example.com", Version: "v1alpha1", Resource: "rayservices"}).Namespace("default")
	if old, err := alpha.Get(ctx, "serve", metav1.GetOptions{}); err != nil || old.GetAPIVersion() != "ray.example.com/v1alpha1" {
		t.Errorf("v1alpha1 read: %v %v", err, old)
	}

	// Plane b: no such API, no discovery entry.
	if _, err := s.Dynamic(t, b).Resource(rayGVR).Namespace("default").List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("plane %s serves the CRD of %s: %v", b, a, err)
	}
	if out, _ := s.Kubectl(t, b, "", "api-resources"); strings.Contains(out, "rayservices") {
		t.Errorf("plane %s discovery lists the CRD of %s", b, a)
	}
	if groups := s.MustKubectl(t, b, "", "get", "--raw", "/clusters/"+b+"/control-plane/apis"); strings.Contains(groups, "ray.example.com") {
		t.Errorf("plane %s /apis lists ray.example.com", b)
	}
	for plane, want := range map[string]bool{a: true, b: false} {
		v2 := s.MustKubectl(t, plane, "", "get", "--raw", "/clusters/"+plane+"/control-plane/openapi/v2")
		if got := strings.Contains(v2, "com.example.ray.v1.RayService"); got != want {
			t.Errorf("OpenAPI v2 of %s has the RayService definition: %v, want %v", plane, got, want)
		}
		v3 := s.MustKubectl(t, plane, "", "get", "--raw", "/clusters/"+plane+"/control-plane/openapi/v3")
		if got := strings.Contains(v3, "apis/ray.example.com/v1"); got != want {
			t.Errorf("OpenAPI v3 index of %s lists ray.example.com/v1: %v, want %v", plane, got, want)
		}
		if !strings.Contains(v3, "/clusters/"+plane+"/control-plane/openapi/v3/api/v1?hash=") {
			t.Errorf("OpenAPI v3 index of %s does not point into the plane: %s", plane, truncate(v3, 300))
		}
	}

	// The same CRD with a different schema in plane b behaves per b's schema.
	strict := strings.Replace(string(crdYAML), "pattern: '^https://'", "pattern: '^s3://'", 1)
	s.MustKubectl(t, b, strict, "apply", "-f", "-")
	waitEstablished(t, s, b, "rayservices.ray.example.com")
	db := s.Dynamic(t, b).Resource(rayGVR).Namespace("default")
	if _, err := db.Create(ctx, rayService("x", "https://models.example.com"), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("plane %s must validate with its own schema: %v", b, err)
	}
	if _, err := db.Create(ctx, rayService("x", "s3://bucket/dag"), metav1.CreateOptions{}); err != nil {
		t.Errorf("plane %s: %v", b, err)
	}
	if _, err := da.Create(ctx, rayService("y", "s3://bucket/dag"), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("plane %s must keep its own schema: %v", a, err)
	}

	// A CRD whose kind is taken in the group: NamesAccepted=False.
	conflict := strings.NewReplacer("rayservices.ray.example.com", "rayjobs.ray.example.com",
		"plural: rayservices", "plural: rayjobs", "singular: rayservice", "singular: rayjob",
		"shortNames: [rsvc]", "shortNames: [rjob]", "listKind: RayServiceList", "listKind: RayJobList").Replace(string(crdYAML))
	s.MustKubectl(t, a, conflict, "apply", "-f", "-")
	var cond string
	framework.Eventually(t, framework.DefaultTimeout, "conflicting CRD judged", func(context.Context) error {
		cond, _ = s.Kubectl(t, a, "", "get", "crd", "rayjobs.ray.example.com", "-o",
			`jsonpath={.status.conditions[?(@.type=="NamesAccepted")].status}/{.status.conditions[?(@.type=="NamesAccepted")].reason}`)
		if !strings.HasPrefix(cond, "False") {
			return fmt.Errorf("NamesAccepted %q", cond)
		}
		return nil
	})
	if cond != "False/KindConflict" {
		t.Errorf("conflicting CRD: NamesAccepted %q, want False/KindConflict", cond)
	}

	// Restart: CRDs and CRs keep serving.
	s.Stop()
	s.Restart(t)
	waitEstablished(t, s, a, "rayservices.ray.example.com")
	if _, err := s.Dynamic(t, a).Resource(rayGVR).Namespace("default").Get(ctx, "serve", metav1.GetOptions{}); err != nil {
		t.Fatalf("after restart: %v", err)
	}

	// Deleting the CRD deletes its resources in that plane only.
	s.MustKubectl(t, a, "", "delete", "crd", "rayservices.ray.example.com", "--timeout=60s")
	if keys := s.DatastoreKeys(t, "/registry/ray.example.com/rayservices/"+a+"/"); len(keys) != 0 {
		t.Errorf("custom resources left after CRD deletion: %v", keys)
	}
	if keys := s.DatastoreKeys(t, "/registry/ray.example.com/rayservices/"+b+"/"); len(keys) != 1 {
		t.Errorf("plane %s lost its custom resources: %v", b, keys)
	}
	if _, err := s.Dynamic(t, a).Resource(rayGVR).Namespace("default").List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deleted CRD still served: %v", err)
	}
}

// TestCustomResourcesServedThroughCRDUpdates: writes to a CRD that keep
// its spec (labels here; status from the conditions controller) leave the
// serving of its custom resources alone: reads racing them never answer
// 404, and a watch opened before goes on.
func TestCustomResourcesServedThroughCRDUpdates(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "crd-updates")
	// A group no other test uses: the CRD's content is this plane's alone.
	const name = "gauges.watchkeep.example.com"
	const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gauges.watchkeep.example.com}
spec:
  group: watchkeep.example.com
  scope: Namespaced
  names: {plural: gauges, singular: gauge, kind: Gauge}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`
	shared.MustKubectl(t, plane, crd, "apply", "-f", "-")
	waitEstablished(t, shared, plane, name)
	ctx, cancel := context.WithTimeout(context.Background(), framework.DefaultTimeout)
	defer cancel()
	gauges := shared.Dynamic(t, plane).Resource(schema.GroupVersionResource{
		Group: "watchkeep.example.com", Version: "v1", Resource: "gauges"}).Namespace("default")
	gauge := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "watchkeep.example.com/v1",
			"kind": "Gauge", "metadata": map[string]any{"name": name}}}
	}
	if _, err := gauges.Create(ctx, gauge("before"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := gauges.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("first event %s %v, want the ADDED of the existing gauge", ev.Type, ev.Object)
	}

	// Readers race the CRD's updates.
	readErr := make(chan error, 1)
	readCtx, stopReading := context.WithCancel(ctx)
	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for readCtx.Err() == nil {
				if _, err := gauges.Get(readCtx, "before", metav1.GetOptions{}); err != nil && readCtx.Err() == nil {
					select {
					case readErr <- err:
					default:
					}
					return
				}
			}
		}()
	}
	crds := shared.Dynamic(t, plane).Resource(schema.GroupVersionResource{
		Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	updates := 0
	framework.Consistently(t, 3*time.Second, "reads of gauge before while its CRD is relabeled", func(ctx context.Context) error {
		updates++
		patch := fmt.Sprintf(`{"metadata":{"labels":{"touched":"%d"}}}`, updates)
		if _, err := crds.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("relabeling the CRD: %w", err)
		}
		select {
		case err := <-readErr:
			return fmt.Errorf("a read after %d updates of the CRD: %w", updates, err)
		default:
			return nil
		}
	})
	stopReading()
	readers.Wait()

	if _, err := gauges.Create(ctx, gauge("after"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, open := <-w.ResultChan():
		if !open || ev.Type != watch.Added || ev.Object.(*unstructured.Unstructured).GetName() != "after" {
			t.Fatalf("after the CRD's updates the watch gave %s %v (open %v), want the ADDED of gauge after", ev.Type, ev.Object, open)
		}
	case <-ctx.Done():
		t.Fatal("the watch gave nothing after the CRD's updates")
	}
}

// TestCustomResourcesReadInTheirCRDsShape: a custom resource is read the
// way its CRD says now, whichever version it was stored in: in the version
// asked for, pruned and defaulted by the current schema on every read, and
// pruned by the schema of the version asked for, as upstream's storage of
// each served version does.
func TestCustomResourcesReadInTheirCRDsShape(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "crd-shape")
	// A group no other test uses: the CRD's content is this plane's alone.
	const name = "dials.readshape.example.com"
	// Both versions have one schema (v1 gains a field of its own at the
	// end).
	crdOf := func(storage, spec, v1Spec string) string {
		return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: dials.readshape.example.com}
spec:
  group: readshape.example.com
  scope: Namespaced
  names: {plural: dials, singular: dial, kind: Dial}
  versions:
  - {name: v1beta1, served: true, storage: %t, schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: %s}}}}}
  - {name: v1, served: true, storage: %t, schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: %s}}}}}
`, storage == "v1beta1", spec, storage == "v1", v1Spec)
	}
	crd := func(storage, spec string) string { return crdOf(storage, spec, spec) }
	ctx, cancel := context.WithTimeout(context.Background(), framework.DefaultTimeout)
	defer cancel()
	dials := func(version string) dynamic.ResourceInterface {
		return shared.Dynamic(t, plane).Resource(schema.GroupVersionResource{
			Group: "readshape.example.com", Version: version, Resource: "dials"}).Namespace("default")
	}
	dial := func(version, name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "readshape.example.com/" + version,
			"kind": "Dial", "metadata": map[string]any{"name": name}, "spec": spec}}
	}

	// old is stored in v1beta1.
	shared.MustKubectl(t, plane, crd("v1beta1", `{size: {type: integer}, color: {type: string}}`), "apply", "-f", "-")
	waitEstablished(t, shared, plane, name)
	if _, err := dials("v1beta1").Create(ctx, dial("v1beta1", "old", map[string]any{"size": int64(1), "color": "red"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// new is stored in v1, once a dry run shows the CRD's update serving.
	shared.MustKubectl(t, plane, crd("v1", `{size: {type: integer}, mode: {type: string}, tier: {type: string, default: silver}}`), "apply", "-f", "-")
	framework.Eventually(t, framework.DefaultTimeout, "v1 the storage version", func(ctx context.Context) error {
		probe, err := dials("v1").Create(ctx, dial("v1", "probe", map[string]any{}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if tier, _, _ := unstructured.NestedString(probe.Object, "spec", "tier"); tier != "silver" {
			return fmt.Errorf("a dry-run dial has tier %q", tier)
		}
		return nil
	})
	if _, err := dials("v1").Create(ctx, dial("v1", "new", map[string]any{"size": int64(2), "mode": "manual"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The schema loses color and mode, and tier's default changes: stored
	// objects are pruned when read, and old, stored without a tier, gets
	// the new default.
	shared.MustKubectl(t, plane, crd("v1", `{size: {type: integer}, tier: {type: string, default: gold}}`), "apply", "-f", "-")

	want := map[string]map[string]string{"v1beta1": {"old": "map[size:1 tier:gold]", "new": "map[size:2 tier:silver]"}}
	want["v1"] = want["v1beta1"]
	readAsWanted(t, dials, want)

	// v1 gains a field of its own: a dial written with it through v1
	// keeps it there and shows without it through v1beta1, whose schema
	// prunes it.
	shared.MustKubectl(t, plane, crdOf("v1", `{size: {type: integer}, tier: {type: string, default: gold}}`,
		`{size: {type: integer}, tier: {type: string, default: gold}, wide: {type: string}}`), "apply", "-f", "-")
	wide := dial("v1", "wide", map[string]any{"size": int64(3), "wide": "yes"})
	framework.Eventually(t, framework.DefaultTimeout, "v1 serving its new field", func(ctx context.Context) error {
		probe, err := dials("v1").Create(ctx, wide, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if field, _, _ := unstructured.NestedString(probe.Object, "spec", "wide"); field != "yes" {
			return fmt.Errorf("a dry-run dial has spec %v", probe.Object["spec"])
		}
		return nil
	})
	if _, err := dials("v1").Create(ctx, wide, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want["v1"] = map[string]string{"old": "map[size:1 tier:gold]", "new": "map[size:2 tier:silver]", "wide": "map[size:3 tier:gold wide:yes]"}
	want["v1beta1"] = map[string]string{"old": "map[size:1 tier:gold]", "new": "map[size:2 tier:silver]", "wide": "map[size:3 tier:gold]"}
	readAsWanted(t, dials, want)
}

// readAsWanted waits until every dial reads, by GET and LIST in each
// version of want, with the spec want gives it.
func readAsWanted(t *testing.T, dials func(version string) dynamic.ResourceInterface, want map[string]map[string]string) {
	t.Helper()
	framework.Eventually(t, framework.DefaultTimeout, "dials read in the CRD's new shape", func(ctx context.Context) error {
		for version, want := range want {
			for name, spec := range want {
				got, err := dials(version).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("GET %s %s: %w", version, name, err)
				}
				if err := dialIs(got, version, spec); err != nil {
					return fmt.Errorf("GET %s: %w", version, err)
				}
			}
			list, err := dials(version).List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("LIST %s: %w", version, err)
			}
			if len(list.Items) != len(want) {
				return fmt.Errorf("LIST %s: %d dials, want %d", version, len(list.Items), len(want))
			}
			for i := range list.Items {
				if err := dialIs(&list.Items[i], version, want[list.Items[i].GetName()]); err != nil {
					return fmt.Errorf("LIST %s: %w", version, err)
				}
			}
		}
		return nil
	})
}

func dialIs(got *unstructured.Unstructured, version, spec string) error {
	gotSpec, _, _ := unstructured.NestedMap(got.Object, "spec")
	if got.GetAPIVersion() != "readshape.example.com/"+version || fmt.Sprint(gotSpec) != spec {
		return fmt.Errorf("%s %s has spec %v, want %s %s", got.GetAPIVersion(), got.GetName(), gotSpec, version, spec)
	}
	return nil
}
