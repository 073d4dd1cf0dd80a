package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"kplane.dev/kplane/test/e2e/framework"
)

// bootstrapKinds are the resources a new plane starts with objects of.
var bootstrapKinds = append(append([]schema.GroupVersionResource{}, scenarioKinds...),
	schema.GroupVersionResource{Version: "v1", Resource: "services"},
	schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
)

// bootstrapState is a plane's objects of bootstrapKinds, root CA
// ConfigMaps included, without what differs between planes holding the
// same objects.
func bootstrapState(t *testing.T, d dynamic.Interface) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, gvr := range bootstrapKinds {
		list, err := d.Resource(gvr).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing %s: %v", gvr.Resource, err)
		}
		for _, item := range list.Items {
			key := gvr.Resource + "/" + item.GetNamespace() + "/" + item.GetName()
			out[key] = withoutPlaneDetails(&item)
			switch {
			case gvr.Resource == "configmaps" && item.GetName() == "kube-root-ca.crt":
				// Each server has its own CA...
				out[key] = "present"
			case gvr.Resource == "services" && item.GetName() == "kubernetes":
				// ... and its own port.
				out[key] = targetPort.ReplaceAllString(out[key], "")
			}
		}
	}
	return out
}

var targetPort = regexp.MustCompile(`"targetPort":[0-9]+`)

// planeRecords are the datastore keys that hold plane's own records.
func planeRecords(t *testing.T, s *framework.Server, plane string) []string {
	var out []string
	for _, k := range s.DatastoreKeys(t, "/registry/") {
		if strings.Contains(k, "/"+plane+"/") {
			out = append(out, k)
		}
	}
	return out
}

// TestPlainPlaneStandsOnBase: a plane made from nothing stores nothing of
// its own, serves what a plane holding copies of the bootstrap serves, and
// a reset returns it there; --plane-base=false keeps the copies.
func TestPlainPlaneStandsOnBase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := shared
	plane := uniquePlane(t, "on-base")
	createPlane(t, s, plane, "")
	if records := planeRecords(t, s, plane); len(records) != 0 {
		t.Fatalf("a new plane on the base stores %d records of its own: %v", len(records), records)
	}
	p, err := s.Dynamic(t, "root").Resource(planesGVR).Get(ctx, plane, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := p.GetAnnotations()["kplane.dev/base"]
	if !strings.HasPrefix(base, "base.") {
		t.Fatalf("the Plane's kplane.dev/base annotation: %q", base)
	}
	patch := []byte(`{"metadata":{"annotations":{"kplane.dev/base":"base.other"}}}`)
	if _, err := s.Dynamic(t, "root").Resource(planesGVR).Patch(ctx, plane, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("changing the base of a plane: want 422, got %v", err)
	}
	if _, err := s.Client(t, "root").CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	onBase := bootstrapState(t, s.Dynamic(t, plane))

	copies := framework.StartServer(t, framework.Options{Args: []string{"--plane-base=false"}})
	createPlane(t, copies, "copied", "")
	if n := len(planeRecords(t, copies, "copied")); n < 20 {
		t.Fatalf("a plane of a server without base holds %d records, want its copy of the bootstrap", n)
	}
	if d := diffStates(bootstrapState(t, copies.Dynamic(t, "copied")), onBase); d != "" {
		t.Fatalf("a plane on the base differs from a plane holding copies:\n%s", d)
	}

	// Changes are the plane's own, and a reset takes them back.
	c := s.Client(t, plane)
	if err := c.CoreV1().Namespaces().Delete(ctx, "kube-node-lease", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.RbacV1().ClusterRoles().Delete(ctx, "view", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "namespace kube-node-lease of "+plane+" deleted", func(ctx context.Context) error {
		ns, err := c.CoreV1().Namespaces().Get(ctx, "kube-node-lease", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("still %s", ns.Status.Phase)
	})
	other := uniquePlane(t, "on-base-other")
	createPlane(t, s, other, "")
	if d := diffStates(onBase, bootstrapState(t, s.Dynamic(t, other))); d != "" {
		t.Fatalf("one plane's changes reached another plane on the same base:\n%s", d)
	}
	if code := resetPlane(t, s, plane); code != http.StatusOK {
		t.Fatalf("reset: HTTP %d", code)
	}
	if d := diffStates(onBase, bootstrapState(t, s.Dynamic(t, plane))); d != "" {
		t.Fatalf("a reset plane differs from a new one:\n%s", d)
	}
}
