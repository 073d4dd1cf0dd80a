package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"kplane.dev/kplane/sdk/go/kplanetest"

	servingv1alpha1 "kplane.dev/kplane/examples/rayserve-operator/api/v1alpha1"
)

// testCase is one case of the suite; both backends run every case.
type testCase struct {
	name string
	run  func(h *harness)
	// apiOnly cases write what a workload controller would (a
	// Deployment's status): on kplane they take a plane without the
	// simulation, whose controllers would overwrite it.
	apiOnly bool
}

// variant is a RayServe spec the cases start from.
type variant struct {
	name string
	spec servingv1alpha1.RayServeSpec
	// availableReason is the Available condition's reason where no
	// Deployment controller runs (envtest): no replica is ever available.
	availableReason string
}

func variants() []variant {
	bigConfig := map[string]string{}
	for i := range 50 {
		bigConfig[fmt.Sprintf("app-%02d.yaml", i)] = strings.Repeat(fmt.Sprintf("route: /v%d\n", i), 20)
	}
	return []variant{
		{"minimal", servingv1alpha1.RayServeSpec{Image: "rayproject/ray:2.40.0"}, "ReplicasUnavailable"},
		{"three-replicas", servingv1alpha1.RayServeSpec{Image: "rayproject/ray:2.40.0", Replicas: ptr.To[int32](3)}, "ReplicasUnavailable"},
		{"zero-replicas", servingv1alpha1.RayServeSpec{Image: "rayproject/ray:2.40.0", Replicas: ptr.To[int32](0)}, "ReplicasUnavailable"},
		{"custom-port", servingv1alpha1.RayServeSpec{Image: "rayproject/ray:2.40.0", Port: 9000}, "ReplicasUnavailable"},
		{"nodeport", servingv1alpha1.RayServeSpec{Image: "rayproject/ray:2.40.0", ServiceType: corev1.ServiceTypeNodePort}, "ReplicasUnavailable"},
		{"loadbalancer", servingv1alpha1.RayServeSpec{Image: "rayproject/ray:2.40.0", ServiceType: corev1.ServiceTypeLoadBalancer}, "ReplicasUnavailable"},
		{"big-config", servingv1alpha1.RayServeSpec{Image: "rayproject/ray:2.40.0", ServeConfig: bigConfig}, "ReplicasUnavailable"},
		{"suspended", servingv1alpha1.RayServeSpec{Image: "rayproject/ray:2.40.0", Replicas: ptr.To[int32](2), Suspend: true}, "Suspended"},
	}
}

func variantNamed(name string) variant {
	for _, v := range variants() {
		if v.name == name {
			return v
		}
	}
	panic("no variant " + name)
}

// cases is the whole suite: 54 cases.
func cases() []testCase {
	var out []testCase
	for _, v := range variants() {
		out = append(out, testCase{name: "create/" + v.name, run: func(h *harness) {
			rs := h.create("rs", v.spec)
			h.expectChildren(rs.Name)
			status, reason := metav1.ConditionFalse, v.availableReason
			if h.simulated && reason == "ReplicasUnavailable" {
				// kplane runs the workloads: the Deployment controller makes
				// the Pods and the simulated kubelet runs them, so every
				// replica becomes available (at once for none). envtest
				// runs no controller: none ever does.
				status, reason = metav1.ConditionTrue, "ReplicasAvailable"
			}
			h.expectCondition(rs.Name, servingv1alpha1.ConditionAvailable, status, reason)
		}})
	}
	out = append(out, updateCases()...)
	out = append(out, childCases()...)
	out = append(out, validationCases()...)
	out = append(out, statusCases()...)
	out = append(out, lifecycleCases()...)
	out = append(out, rbacCases()...)
	return out
}

// updateCases change the spec of a running RayServe.
func updateCases() []testCase {
	changes := []struct {
		name   string
		change func(*servingv1alpha1.RayServeSpec)
	}{
		{"image", func(s *servingv1alpha1.RayServeSpec) { s.Image = "rayproject/ray:2.41.0" }},
		{"replicas", func(s *servingv1alpha1.RayServeSpec) { s.Replicas = ptr.To[int32](7) }},
		{"port", func(s *servingv1alpha1.RayServeSpec) { s.Port = 8080 }},
		{"config", func(s *servingv1alpha1.RayServeSpec) { s.ServeConfig = map[string]string{"app.yaml": "route: /new"} }},
		{"service-type", func(s *servingv1alpha1.RayServeSpec) {
			if s.ServiceType == corev1.ServiceTypeNodePort {
				s.ServiceType = corev1.ServiceTypeClusterIP
			} else {
				s.ServiceType = corev1.ServiceTypeNodePort
			}
		}},
		{"suspend", func(s *servingv1alpha1.RayServeSpec) { s.Suspend = true }},
		{"config-key-removed", func(s *servingv1alpha1.RayServeSpec) {
			for k := range s.ServeConfig {
				delete(s.ServeConfig, k)
				break
			}
		}},
	}
	var out []testCase
	for _, base := range []string{"minimal", "nodeport"} {
		for _, c := range changes {
			out = append(out, testCase{name: "update/" + base + "/" + c.name, run: func(h *harness) {
				spec := variantNamed(base).spec
				spec.ServeConfig = map[string]string{"a.yaml": "route: /a", "b.yaml": "route: /b"}
				rs := h.create("rs", spec)
				before := h.expectChildren(rs.Name)
				h.update(rs.Name, func(rs *servingv1alpha1.RayServe) { c.change(&rs.Spec) })
				after := h.expectChildren(rs.Name)
				if c.name == "config" || c.name == "config-key-removed" {
					if before.hash == after.hash {
						h.t.Errorf("the config changed but the pod template's hash did not: %s", after.hash)
					}
				}
			}})
		}
	}
	return out
}

// childCases delete or change a child behind the operator's back.
func childCases() []testCase {
	kinds := []struct {
		name   string
		object func(h *harness, name string) client.Object
		drift  func(obj client.Object)
	}{
		{"deployment", func(h *harness, name string) client.Object { return h.get(&appsv1.Deployment{}, name) },
			func(obj client.Object) {
				d := obj.(*appsv1.Deployment)
				d.Spec.Replicas = ptr.To[int32](42)
				d.Spec.Template.Spec.Containers[0].Image = "someone/else:latest"
			}},
		{"service", func(h *harness, name string) client.Object { return h.get(&corev1.Service{}, name) },
			func(obj client.Object) { obj.(*corev1.Service).Spec.Ports[0].Port = 1234 }},
		{"configmap", func(h *harness, name string) client.Object { return h.get(&corev1.ConfigMap{}, name+"-config") },
			func(obj client.Object) { obj.(*corev1.ConfigMap).Data = map[string]string{"hacked": "yes"} }},
	}
	var out []testCase
	for _, base := range []string{"minimal", "big-config"} {
		for _, k := range kinds {
			out = append(out, testCase{name: "recreate-deleted/" + base + "/" + k.name, run: func(h *harness) {
				rs := h.create("rs", variantNamed(base).spec)
				h.expectChildren(rs.Name)
				obj := k.object(h, rs.Name)
				if err := h.c.Delete(h.ctx, obj); err != nil {
					h.t.Fatal(err)
				}
				h.eventually("the "+k.name+" is recreated", func(ctx context.Context) error {
					fresh := obj.DeepCopyObject().(client.Object)
					if err := h.c.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
						return err
					}
					if fresh.GetUID() == obj.GetUID() {
						return errors.New("still the deleted object")
					}
					return nil
				})
				h.expectChildren(rs.Name)
			}})
			out = append(out, testCase{name: "revert-drift/" + base + "/" + k.name, run: func(h *harness) {
				rs := h.create("rs", variantNamed(base).spec)
				h.expectChildren(rs.Name)
				h.eventually("changing the "+k.name, func(ctx context.Context) error {
					obj := k.object(h, rs.Name)
					k.drift(obj)
					return h.c.Update(ctx, obj) // a conflict with the operator is retried
				})
				h.expectChildren(rs.Name)
			}})
		}
	}
	return out
}

// validationCases: the CRD's schema refuses bad specs (sent as they are,
// not through the Go types, which would drop or default fields).
func validationCases() []testCase {
	bad := []struct {
		name, field string
		spec        map[string]any
	}{
		{"no-image", "spec.image", map[string]any{}},
		{"empty-image", "spec.image", map[string]any{"image": ""}},
		{"negative-replicas", "spec.replicas", map[string]any{"image": "x", "replicas": -1}},
		{"too-many-replicas", "spec.replicas", map[string]any{"image": "x", "replicas": 101}},
		{"replicas-not-a-number", "spec.replicas", map[string]any{"image": "x", "replicas": "three"}},
		{"port-zero", "spec.port", map[string]any{"image": "x", "port": 0}},
		{"port-too-high", "spec.port", map[string]any{"image": "x", "port": 70000}},
		{"unknown-service-type", "spec.serviceType", map[string]any{"image": "x", "serviceType": "ExternalName"}},
	}
	var out []testCase
	for _, b := range bad {
		out = append(out, testCase{name: "validation/" + b.name, run: func(h *harness) {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": servingv1alpha1.GroupVersion.String(), "kind": "RayServe",
				"metadata": map[string]any{"name": "bad", "namespace": h.ns}, "spec": b.spec}}
			err := h.c.Create(h.ctx, obj)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), b.field) {
				h.t.Fatalf("creating a RayServe with %v: %v, want Invalid naming %s", b.spec, err, b.field)
			}
		}})
	}
	out = append(out, testCase{name: "validation/defaults", run: func(h *harness) {
		rs := h.create("rs", servingv1alpha1.RayServeSpec{Image: "x"})
		stored := h.get(&servingv1alpha1.RayServe{}, rs.Name).(*servingv1alpha1.RayServe)
		if ptr.Deref(stored.Spec.Replicas, -1) != 1 || stored.Spec.Port != 8000 || stored.Spec.ServiceType != corev1.ServiceTypeClusterIP {
			h.t.Errorf("defaults: replicas %v, port %d, serviceType %q; want 1, 8000, ClusterIP",
				stored.Spec.Replicas, stored.Spec.Port, stored.Spec.ServiceType)
		}
	}})
	return out
}

// statusCases: the status follows the Deployment and the spec.
func statusCases() []testCase {
	available := func(name string, replicas, ready int32, want metav1.ConditionStatus, reason string) testCase {
		return testCase{name: "status/" + name, run: func(h *harness) {
			rs := h.create("rs", servingv1alpha1.RayServeSpec{Image: "x", Replicas: ptr.To(replicas)})
			h.expectChildren(rs.Name)
			// What the Deployment controller would write; no controller
			// runs on this case's plane (apiOnly), nor on envtest.
			h.eventually("writing the Deployment's status", func(ctx context.Context) error {
				d := h.get(&appsv1.Deployment{}, rs.Name).(*appsv1.Deployment)
				d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: replicas, ReadyReplicas: ready, AvailableReplicas: ready, UpdatedReplicas: ready}
				return h.c.Status().Update(ctx, d) // a conflict with the operator is retried
			})
			// The message tells this state from the one before the write
			// (0 of N, ReplicasUnavailable too).
			h.expectConditionMessage(rs.Name, servingv1alpha1.ConditionAvailable, want, reason,
				fmt.Sprintf("%d of %d replicas available", ready, replicas))
			h.eventually("status.availableReplicas", func(ctx context.Context) error {
				got := h.get(&servingv1alpha1.RayServe{}, rs.Name).(*servingv1alpha1.RayServe).Status.AvailableReplicas
				if got != ready {
					return fmt.Errorf("status.availableReplicas %d, want %d", got, ready)
				}
				return nil
			})
		}, apiOnly: true}
	}
	return []testCase{
		available("all-available", 3, 3, metav1.ConditionTrue, "ReplicasAvailable"),
		available("partly-available", 3, 1, metav1.ConditionFalse, "ReplicasUnavailable"),
		{name: "status/observed-generation", run: func(h *harness) {
			rs := h.create("rs", servingv1alpha1.RayServeSpec{Image: "x"})
			h.expectChildren(rs.Name)
			for i := range 3 {
				h.update(rs.Name, func(rs *servingv1alpha1.RayServe) { rs.Spec.Image = fmt.Sprintf("x:%d", i) })
				h.expectChildren(rs.Name) // checks observedGeneration == generation
			}
			c := h.expectCondition(rs.Name, servingv1alpha1.ConditionReconciled, metav1.ConditionTrue, "ChildrenUpToDate")
			if c.ObservedGeneration != 4 {
				h.t.Errorf("Reconciled observedGeneration %d, want 4", c.ObservedGeneration)
			}
		}},
	}
}

// lifecycleCases: deletion, re-creation and several RayServes side by side.
func lifecycleCases() []testCase {
	return []testCase{
		{name: "delete/children-follow-owner", run: func(h *harness) {
			rs := h.create("rs", servingv1alpha1.RayServeSpec{Image: "x"})
			h.expectChildren(rs.Name)
			if err := h.c.Delete(h.ctx, rs); err != nil {
				h.t.Fatal(err)
			}
			h.expectGone(&servingv1alpha1.RayServe{}, rs.Name)
			if !h.hasGC {
				// No garbage collector here: the owner references are all
				// that can be checked (expectChildren did).
				h.t.Log("no garbage collector on this backend: children keep their owner references to the deleted RayServe")
				return
			}
			h.expectGone(&appsv1.Deployment{}, rs.Name)
			h.expectGone(&corev1.Service{}, rs.Name)
			h.expectGone(&corev1.ConfigMap{}, rs.Name+"-config")
		}},
		{name: "steady/no-needless-update", run: func(h *harness) {
			// What the operator would write over its reconciled children
			// is what the API server stored, defaults included: a steady
			// RayServe costs no update that changes nothing.
			rs := h.create("rs", variantNamed("big-config").spec)
			found := h.expectChildren(rs.Name)
			r := &RayServeReconciler{Scheme: newScheme()}
			stored := h.get(&appsv1.Deployment{}, rs.Name).(*appsv1.Deployment)
			wanted := stored.DeepCopy()
			if err := r.mutateDeployment(wanted, h.get(&servingv1alpha1.RayServe{}, rs.Name).(*servingv1alpha1.RayServe), found.hash); err != nil {
				h.t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(stored, wanted) {
				h.t.Fatalf("the reconciled Deployment would be updated again:\n%s", diff.Diff(stored, wanted))
			}
			svc := h.get(&corev1.Service{}, rs.Name).(*corev1.Service)
			wantedSvc := svc.DeepCopy()
			if err := r.mutateService(wantedSvc, h.get(&servingv1alpha1.RayServe{}, rs.Name).(*servingv1alpha1.RayServe)); err != nil {
				h.t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(svc, wantedSvc) {
				h.t.Fatalf("the reconciled Service would be updated again:\n%s", diff.Diff(svc, wantedSvc))
			}
		}},
		{name: "delete/recreate-same-name", run: func(h *harness) {
			rs := h.create("rs", servingv1alpha1.RayServeSpec{Image: "first"})
			h.expectChildren(rs.Name)
			if err := h.c.Delete(h.ctx, rs); err != nil {
				h.t.Fatal(err)
			}
			h.expectGone(&servingv1alpha1.RayServe{}, rs.Name)
			second := h.create("rs", servingv1alpha1.RayServeSpec{Image: "second"})
			if second.UID == rs.UID {
				h.t.Fatal("the re-created RayServe has the old uid")
			}
			h.expectChildren(second.Name) // owned by the new uid, with the new image
		}},
		{name: "independence/two-rayservers", run: func(h *harness) {
			a := h.create("a", servingv1alpha1.RayServeSpec{Image: "a"})
			b := h.create("b", servingv1alpha1.RayServeSpec{Image: "b", Port: 9000})
			h.expectChildren(a.Name)
			bBefore := h.expectChildren(b.Name)
			h.update(a.Name, func(rs *servingv1alpha1.RayServe) { rs.Spec.Image = "a2" })
			h.expectChildren(a.Name)
			bAfter := h.expectChildren(b.Name)
			// Its spec and labels, not its resourceVersion: on a backend whose
			// Deployments move (kplane's simulated workloads), the deployment
			// controller writes their status and revision annotation meanwhile.
			if bAfter.deployment.Generation != bBefore.deployment.Generation ||
				!equality.Semantic.DeepEqual(bAfter.deployment.Spec, bBefore.deployment.Spec) ||
				!maps.Equal(bAfter.deployment.Labels, bBefore.deployment.Labels) {
				h.t.Error("changing a rewrote b's Deployment")
			}
		}},
		{name: "independence/delete-one", run: func(h *harness) {
			a := h.create("a", servingv1alpha1.RayServeSpec{Image: "a"})
			b := h.create("b", servingv1alpha1.RayServeSpec{Image: "b"})
			h.expectChildren(a.Name)
			h.expectChildren(b.Name)
			if err := h.c.Delete(h.ctx, a); err != nil {
				h.t.Fatal(err)
			}
			if h.hasGC {
				h.expectGone(&appsv1.Deployment{}, a.Name)
			}
			h.expectChildren(b.Name)
		}},
		{name: "scale/ten-rayserves", run: func(h *harness) {
			for i := range 10 {
				h.create(fmt.Sprintf("rs-%d", i), servingv1alpha1.RayServeSpec{Image: "x", Replicas: ptr.To(int32(i))})
			}
			for i := range 10 {
				h.expectChildren(fmt.Sprintf("rs-%d", i))
			}
		}},
	}
}

// rbacCases run the reconciler as a service account with the operator's
// generated ClusterRole (config/rbac/role.yaml), and without it.
func rbacCases() []testCase {
	return []testCase{
		{name: "rbac/manager-role-suffices", run: func(h *harness) {
			operator := h.serviceAccount("operator-sa")
			h.bind("operator-sa", h.managerRole())
			rs := h.create("rs", servingv1alpha1.RayServeSpec{Image: "x"})
			h.eventually("reconcile as the operator's service account", func(ctx context.Context) error {
				_, err := h.reconcileAs(operator, rs.Name)
				return err
			})
			h.expectChildren(rs.Name)
		}},
		{name: "rbac/no-role-forbidden", run: func(h *harness) {
			nobody := h.serviceAccount("nobody")
			rs := h.create("rs", servingv1alpha1.RayServeSpec{Image: "x"})
			if _, err := h.reconcileAs(nobody, rs.Name); !apierrors.IsForbidden(err) {
				h.t.Fatalf("reconcile without a role: %v, want Forbidden", err)
			}
		}},
	}
}

// -- helpers ---------------------------------------------------------------

func (h *harness) create(name string, spec servingv1alpha1.RayServeSpec) *servingv1alpha1.RayServe {
	h.t.Helper()
	rs := &servingv1alpha1.RayServe{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, Spec: *spec.DeepCopy()}
	if err := h.c.Create(h.ctx, rs); err != nil {
		h.t.Fatalf("creating RayServe %s: %v", name, err)
	}
	return rs
}

func (h *harness) get(obj client.Object, name string) client.Object {
	h.t.Helper()
	if err := h.c.Get(h.ctx, types.NamespacedName{Namespace: h.ns, Name: name}, obj); err != nil {
		h.t.Fatalf("getting %T %s: %v", obj, name, err)
	}
	return obj
}

func (h *harness) update(name string, change func(*servingv1alpha1.RayServe)) {
	h.t.Helper()
	h.eventually("updating RayServe "+name, func(ctx context.Context) error {
		rs := &servingv1alpha1.RayServe{}
		if err := h.c.Get(ctx, types.NamespacedName{Namespace: h.ns, Name: name}, rs); err != nil {
			return err
		}
		change(rs)
		return h.c.Update(ctx, rs) // a conflict with the operator's status write is retried
	})
}

func (h *harness) expectGone(obj client.Object, name string) {
	h.t.Helper()
	h.eventually(fmt.Sprintf("%T %s is deleted", obj, name), func(ctx context.Context) error {
		err := h.c.Get(ctx, types.NamespacedName{Namespace: h.ns, Name: name}, obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return errors.New("still there")
		}
		return err
	})
}

// children is what expectChildren found.
type children struct {
	deployment *appsv1.Deployment
	hash       string
}

// expectChildren waits until the RayServe's Deployment, Service and
// ConfigMap match its spec, carry its controller reference, and its status
// describes its current generation.
func (h *harness) expectChildren(name string) children {
	h.t.Helper()
	var found children
	h.eventually("children of RayServe "+name+" match its spec", func(ctx context.Context) error {
		key := types.NamespacedName{Namespace: h.ns, Name: name}
		rs, d, svc, cm := &servingv1alpha1.RayServe{}, &appsv1.Deployment{}, &corev1.Service{}, &corev1.ConfigMap{}
		for _, get := range []struct {
			key types.NamespacedName
			obj client.Object
		}{{key, rs}, {key, d}, {key, svc}, {types.NamespacedName{Namespace: h.ns, Name: name + "-config"}, cm}} {
			if err := h.c.Get(ctx, get.key, get.obj); err != nil {
				return err
			}
		}
		if err := childrenMatch(rs, d, svc, cm); err != nil {
			return err
		}
		found = children{deployment: d, hash: d.Spec.Template.Annotations[ConfigHashAnnotation]}
		return nil
	})
	return found
}

func childrenMatch(rs *servingv1alpha1.RayServe, d *appsv1.Deployment, svc *corev1.Service, cm *corev1.ConfigMap) error {
	for _, obj := range []client.Object{d, svc, cm} {
		owner := metav1.GetControllerOf(obj)
		if owner == nil || owner.UID != rs.UID || owner.Kind != "RayServe" || !ptr.Deref(owner.BlockOwnerDeletion, false) {
			return fmt.Errorf("%T %s: controller reference %+v, want RayServe uid %s", obj, obj.GetName(), owner, rs.UID)
		}
	}
	replicas := ptr.Deref(rs.Spec.Replicas, 1)
	if rs.Spec.Suspend {
		replicas = 0
	}
	c := d.Spec.Template.Spec.Containers
	switch {
	case ptr.Deref(d.Spec.Replicas, -1) != replicas:
		return fmt.Errorf("deployment replicas %d, want %d", ptr.Deref(d.Spec.Replicas, -1), replicas)
	case len(c) != 1 || c[0].Image != rs.Spec.Image || len(c[0].Ports) != 1 || c[0].Ports[0].ContainerPort != rs.Spec.Port:
		return fmt.Errorf("deployment containers %+v, want image %s on port %d", c, rs.Spec.Image, rs.Spec.Port)
	case d.Spec.Template.Annotations[ConfigHashAnnotation] != configHash(rs.Spec.ServeConfig):
		return fmt.Errorf("pod template config hash %q, want %q", d.Spec.Template.Annotations[ConfigHashAnnotation], configHash(rs.Spec.ServeConfig))
	case !maps.Equal(d.Spec.Selector.MatchLabels, svc.Spec.Selector) || !maps.Equal(d.Spec.Template.Labels, svc.Spec.Selector):
		return fmt.Errorf("service selector %v does not select the pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
	case len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != rs.Spec.Port || svc.Spec.Type != rs.Spec.ServiceType:
		return fmt.Errorf("service %s ports %+v, want %s on %d", svc.Spec.Type, svc.Spec.Ports, rs.Spec.ServiceType, rs.Spec.Port)
	case !maps.Equal(cm.Data, rs.Spec.ServeConfig) && len(cm.Data)+len(rs.Spec.ServeConfig) > 0:
		return fmt.Errorf("configmap holds %d keys, want the %d of spec.serveConfig", len(cm.Data), len(rs.Spec.ServeConfig))
	case rs.Status.ObservedGeneration != rs.Generation || rs.Status.ConfigHash != configHash(rs.Spec.ServeConfig):
		return fmt.Errorf("status describes generation %d (config %s), want %d", rs.Status.ObservedGeneration, rs.Status.ConfigHash, rs.Generation)
	case !meta.IsStatusConditionTrue(rs.Status.Conditions, servingv1alpha1.ConditionReconciled):
		return fmt.Errorf("condition Reconciled is not True: %+v", rs.Status.Conditions)
	}
	return nil
}

func (h *harness) expectCondition(name, condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	h.t.Helper()
	return h.expectConditionMessage(name, condType, status, reason, "")
}

// expectConditionMessage is expectCondition that also waits for the
// condition's message, unless it is empty.
func (h *harness) expectConditionMessage(name, condType string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	h.t.Helper()
	var found metav1.Condition
	h.eventually(fmt.Sprintf("condition %s=%s (%s) on %s", condType, status, reason, name), func(ctx context.Context) error {
		rs := &servingv1alpha1.RayServe{}
		if err := h.c.Get(ctx, types.NamespacedName{Namespace: h.ns, Name: name}, rs); err != nil {
			return err
		}
		c := meta.FindStatusCondition(rs.Status.Conditions, condType)
		if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != rs.Generation || (message != "" && c.Message != message) {
			return fmt.Errorf("conditions %+v", rs.Status.Conditions)
		}
		found = *c
		return nil
	})
	return found
}

// serviceAccount is a client config of a new service account of the
// harness's namespace: plane-bound on kplane, and allowed nothing yet.
func (h *harness) serviceAccount(name string) client.Client {
	h.t.Helper()
	cfg := kplanetest.Identity(h.t, h.cfg, h.ns, name)
	c, err := client.New(cfg, client.Options{Scheme: newScheme()})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// managerRole is config/rbac/role.yaml, named for this case: envtest's
// cases share cluster-scoped objects.
func (h *harness) managerRole() *rbacv1.ClusterRole {
	h.t.Helper()
	data, err := os.ReadFile("../../config/rbac/role.yaml")
	if err != nil {
		h.t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		h.t.Fatal(err)
	}
	role.Name = "rayserve-manager-" + h.ns
	if err := h.c.Create(h.ctx, role); err != nil {
		h.t.Fatal(err)
	}
	return role
}

func (h *harness) bind(serviceAccount string, role *rbacv1.ClusterRole) {
	h.t.Helper()
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: h.ns}}}
	if err := h.c.Create(h.ctx, binding); err != nil {
		h.t.Fatal(err)
	}
}

// reconcileAs runs one Reconcile of RayServe name with c's identity.
func (h *harness) reconcileAs(c client.Client, name string) (ctrl.Result, error) {
	r := &RayServeReconciler{Client: c, Scheme: newScheme()}
	return r.Reconcile(h.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: h.ns, Name: name}})
}
