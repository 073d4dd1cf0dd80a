package e2e

import (
	"context"
	"errors"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/test/e2e/framework"
)

var gadgetGVR = schema.GroupVersionResource{Group: "aggregation.example.org", Version: "v1", Resource: "gadgets"}

// gadgetsCRD is a namespaced CRD with an open schema.
func gadgetsCRD() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gadgets.aggregation.example.org"},
		"spec": map[string]any{
			"group": "aggregation.example.org", "scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// gadgetRule is what the tenant's aggregated role grants.
var gadgetRule = rbacv1.PolicyRule{APIGroups: []string{"aggregation.example.org"}, Resources: []string{"gadgets"}, Verbs: []string{"get"}}

func hasRule(t *testing.T, c kubernetes.Interface, role string, rule rbacv1.PolicyRule) bool {
	t.Helper()
	r, err := c.RbacV1().ClusterRoles().Get(t.Context(), role, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading clusterrole %s: %v", role, err)
	}
	return slices.ContainsFunc(r.Rules, func(got rbacv1.PolicyRule) bool {
		return slices.Equal(got.APIGroups, rule.APIGroups) && slices.Equal(got.Resources, rule.Resources) &&
			slices.Equal(got.Verbs, rule.Verbs) && len(got.ResourceNames) == 0 && len(got.NonResourceURLs) == 0
	})
}

// expect is a condition's error: nil when ok, else what is still wrong.
func expect(ok bool, wrong string) error {
	if ok {
		return nil
	}
	return errors.New(wrong)
}

// viewerGets reads the gadget as a user bound to view in plane and reports
// whether authorization allowed it.
func viewerGets(t *testing.T, plane string) bool {
	t.Helper()
	cfg := shared.RESTConfig(plane)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "gadget-viewer"}
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Resource(gadgetGVR).Namespace("default").Get(t.Context(), "g", metav1.GetOptions{})
	switch {
	case err == nil:
		return true
	case apierrors.IsForbidden(err):
		return false
	}
	t.Fatalf("reading the gadget as a viewer in %s: %v", plane, err)
	return false
}

// TestClusterRoleAggregation: a tenant's ClusterRole labelled
// aggregate-to-view reaches view (and, through it, edit and admin) in its
// plane only, grants what it says to users bound to view, and leaves when
// the role is deleted. No other plane's roles ever gain the rule.
func TestClusterRoleAggregation(t *testing.T) {
	t.Parallel()
	s := shared
	a, b := uniquePlane(t, "aggregation-a"), uniquePlane(t, "aggregation-b")
	ctx := t.Context()
	ca, cb := s.Client(t, a), s.Client(t, b)
	for _, plane := range []string{a, b} {
		if _, err := s.Dynamic(t, plane).Resource(crdGVR).Create(ctx, gadgetsCRD(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitEstablished(t, s, plane, "gadgets.aggregation.example.org")
		gadget := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "aggregation.example.org/v1", "kind": "Gadget",
			"metadata": map[string]any{"name": "g", "namespace": "default"}}}
		framework.Eventually(t, framework.DefaultTimeout, "gadget created in "+plane, func(ctx context.Context) error {
			_, err := s.Dynamic(t, plane).Resource(gadgetGVR).Namespace("default").Create(ctx, gadget, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gadget-viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "gadget-viewer"}}}
		if _, err := s.Client(t, plane).RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if viewerGets(t, a) {
		t.Fatal("view grants gadgets before any role aggregates them")
	}

	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gadget-reader",
		Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
		Rules: []rbacv1.PolicyRule{gadgetRule}}
	if _, err := ca.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, aggregated := range []string{"view", "edit", "admin"} {
		framework.Eventually(t, framework.DefaultTimeout, aggregated+" in "+a+" gains the rule", func(context.Context) error {
			return expect(hasRule(t, ca, aggregated, gadgetRule), "rule missing")
		})
	}
	framework.Eventually(t, framework.DefaultTimeout, "a viewer in "+a+" may get gadgets", func(context.Context) error {
		return expect(viewerGets(t, a), "forbidden")
	})

	for _, aggregated := range []string{"view", "edit", "admin"} {
		if hasRule(t, cb, aggregated, gadgetRule) {
			t.Fatalf("%s in %s has plane %s's rule", aggregated, b, a)
		}
	}
	if viewerGets(t, b) {
		t.Fatalf("a viewer in %s may get gadgets", b)
	}

	if err := ca.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, aggregated := range []string{"view", "edit", "admin"} {
		framework.Eventually(t, framework.DefaultTimeout, aggregated+" in "+a+" loses the rule", func(context.Context) error {
			return expect(!hasRule(t, ca, aggregated, gadgetRule), "rule still there")
		})
	}
	framework.Eventually(t, framework.DefaultTimeout, "a viewer in "+a+" may no longer get gadgets", func(context.Context) error {
		return expect(!viewerGets(t, a), "still allowed")
	})
	// What view aggregates from the bootstrap policy is still granted.
	cfg := s.RESTConfig(a)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "gadget-viewer"}
	viewer, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := viewer.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("a viewer lists configmaps after the aggregation changed: %v", err)
	}
}
