package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"kplane.dev/kplane/test/e2e/framework"
)

// clonePlane creates plane name as a clone of source through the CLI,
// which waits until it is ready.
func clonePlane(t *testing.T, s *framework.Server, name, source string) {
	t.Helper()
	if out, err := kplaneCmd(t, s, "planes", "create", name, "--from", source); err != nil {
		t.Fatalf("kplane planes create %s --from %s: %v\n%s", name, source, err, out)
	}
}

// TestCloneStartsAsSource: a clone starts as its source's state, custom
// resources included, and the two change apart afterwards.
func TestCloneStartsAsSource(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	src, clone := uniquePlane(t, "clone-src"), uniquePlane(t, "clone")
	createPlane(t, s, src, "")
	cs := s.Client(t, src)
	seedScenario(t, cs)
	if err := cs.CoreV1().Secrets("shop").Delete(ctx, "s-3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	crdYAML, err := os.ReadFile("testdata/rayservices-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s.MustKubectl(t, src, string(crdYAML), "apply", "-f", "-")
	waitEstablished(t, s, src, "rayservices.ray.example.com")
	for _, name := range []string{"one", "two"} {
		if _, err := s.Dynamic(t, src).Resource(rayGVR).Namespace("default").Create(ctx, rayService(name, "https://m.example.com/"+name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := planeState(t, s.Dynamic(t, src))

	clonePlane(t, s, clone, src)
	cc := s.Client(t, clone)
	if d := diffStates(before, planeState(t, s.Dynamic(t, clone))); d != "" {
		t.Fatalf("the clone differs from its source:\n%s", d)
	}
	rays, err := s.Dynamic(t, clone).Resource(rayGVR).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(rays.Items) != 2 {
		t.Fatalf("the clone's custom resources: %d, %v", len(rays.Items), err)
	}

	// Apart afterwards: each plane's change is its own.
	if err := cs.CoreV1().ConfigMaps("shop").Delete(ctx, "cm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.CoreV1().ConfigMaps("shop").Get(ctx, "cm-0", metav1.GetOptions{}); err != nil {
		t.Fatalf("the source's later deletion reached the clone: %v", err)
	}
	if _, err := cc.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "clone-only", Namespace: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("shop").Get(ctx, "clone-only", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the clone's creation reached the source: %v", err)
	}
	// The source stays writable: a clone is not a member.
	if _, err := cs.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("writing the source of a clone: %v", err)
	}
}

// TestCloneOfMember: a clone of a template's member holds the member's
// changes and stands on the same template, which it keeps read-only.
func TestCloneOfMember(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	tmpl, member, clone := uniquePlane(t, "ct-tmpl"), uniquePlane(t, "ct-member"), uniquePlane(t, "ct-clone")
	createPlane(t, s, tmpl, "")
	seedScenario(t, s.Client(t, tmpl))
	createPlane(t, s, member, tmpl)
	cm := s.Client(t, member)
	if _, err := cm.CoreV1().ConfigMaps("shop").Patch(ctx, "cm-1", types.MergePatchType, []byte(`{"data":{"v":"member"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cm.CoreV1().Secrets("shop").Delete(ctx, "s-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cm.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	memberState := planeState(t, s.Dynamic(t, member))

	clonePlane(t, s, clone, member)
	if d := diffStates(memberState, planeState(t, s.Dynamic(t, clone))); d != "" {
		t.Fatalf("the clone differs from the member it was cloned from:\n%s", d)
	}
	p, err := s.Dynamic(t, "root").Resource(planesGVR).Get(ctx, clone, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(p.Object, "spec", "template"); got != tmpl {
		t.Fatalf("the clone's spec.template: %q, want its source's %q", got, tmpl)
	}
	// The template now also holds the clone up; deleting the member leaves
	// the clone whole.
	if err := s.Dynamic(t, "root").Resource(planesGVR).Delete(ctx, member, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "member "+member+" gone", func(ctx context.Context) error {
		_, err := s.Dynamic(t, "root").Resource(planesGVR).Get(ctx, member, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	err = s.Dynamic(t, "root").Resource(planesGVR).Delete(ctx, tmpl, metav1.DeleteOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), clone) {
		t.Fatalf("deleting the template of a clone: want 409 naming it, got %v", err)
	}
	if d := diffStates(memberState, planeState(t, s.Dynamic(t, clone))); d != "" {
		t.Fatalf("the clone changed when its source was deleted:\n%s", d)
	}
	// A reset takes the clone to its template's state.
	if code := resetPlane(t, s, clone); code != 200 {
		t.Fatalf("reset of the clone: HTTP %d", code)
	}
	if d := diffStates(planeState(t, s.Dynamic(t, tmpl)), planeState(t, s.Dynamic(t, clone))); d != "" {
		t.Fatalf("a reset clone differs from its template:\n%s", d)
	}
}

// TestCloneBadInput: a source that cannot be cloned is refused with 422.
func TestCloneBadInput(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	name, other := uniquePlane(t, "badclone"), uniquePlane(t, "badclone-src")
	createPlane(t, s, other, "")
	for _, c := range []struct {
		spec map[string]any
		want string
	}{
		{map[string]any{"from": "no-such-plane"}, "does not exist"},
		{map[string]any{"from": name}, "cloned from itself"},
		{map[string]any{"from": "root"}, "root plane cannot be cloned"},
		{map[string]any{"from": other, "template": other}, "not both"},
	} {
		_, err := s.Dynamic(t, "root").Resource(planesGVR).Create(ctx, newPlane(name, c.spec), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("spec %v: want 422 saying %q, got %v", c.spec, c.want, err)
		}
	}
	if out, err := kplaneCmd(t, s, "planes", "create", name, "--from", "no-such-plane"); err == nil || !strings.Contains(out, "does not exist") {
		t.Errorf("CLI clone of an unknown plane: want an error saying it does not exist, got %v\n%s", err, out)
	}
	clone := uniquePlane(t, "fixedfrom")
	clonePlane(t, s, clone, other)
	patch := []byte(`{"spec":{"from":"root"}}`)
	if _, err := s.Dynamic(t, "root").Resource(planesGVR).Patch(ctx, clone, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("changing spec.from later: want 422, got %v", err)
	}
}

// TestCreateFromManifests: `kplane planes create <id> -f <dir>` makes a
// scenario from manifests (a CRD and objects of it included), ready to
// make planes from.
func TestCreateFromManifests(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	dir := t.TempDir()
	crdYAML, err := os.ReadFile("testdata/rayservices-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"01-crd.yaml": string(crdYAML),
		"02-shop.yaml": `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop}
data: {mode: broken}
---
apiVersion: ray.example.com/v1
kind: RayService
metadata: {name: serve, namespace: shop}
spec: {dag: {source: "https://m.example.com/serve"}}
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	scenario := uniquePlane(t, "from-files")
	out, err := kplaneCmd(t, s, "planes", "create", scenario, "-f", dir)
	if err != nil || !strings.Contains(out, "4 objects applied") {
		t.Fatalf("kplane planes create -f: %v\n%s", err, out)
	}
	member := uniquePlane(t, "from-files-member")
	createPlane(t, s, member, scenario)
	cm, err := s.Client(t, member).CoreV1().ConfigMaps("shop").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil || cm.Data["mode"] != "broken" {
		t.Fatalf("the member's ConfigMap from the manifests: %v %v", cm, err)
	}
	if _, err := s.Dynamic(t, member).Resource(rayGVR).Namespace("shop").Get(ctx, "serve", metav1.GetOptions{}); err != nil {
		t.Fatalf("the member's RayService from the manifests: %v", err)
	}

	// A manifest for another plane is refused before anything is applied.
	bad := filepath.Join(t.TempDir(), "other.yaml")
	if err := os.WriteFile(bad, []byte("plane: elsewhere\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: default}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := uniquePlane(t, "from-bad")
	out, err = kplaneCmd(t, s, "planes", "create", refused, "-f", bad)
	if err == nil || !strings.Contains(out, "names plane elsewhere") {
		t.Fatalf("a manifest for another plane: want an error naming it, got %v\n%s", err, out)
	}
	if _, err := s.Dynamic(t, "root").Resource(planesGVR).Get(ctx, refused, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the plane of refused manifests was created: %v", err)
	}
}
