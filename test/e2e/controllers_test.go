package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"kplane.dev/kplane/test/e2e/framework"
)

// fillNamespace writes 50 objects of 8 kinds (plus custom resources when
// withCRs) into ns and returns how many it wrote.
func fillNamespace(t *testing.T, c kubernetes.Interface, ns string) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	for i := range 10 {
		_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{})
		must(err)
		_, err = c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i)}}, metav1.CreateOptions{})
		must(err)
	}
	for i := range 5 {
		name := fmt.Sprintf("o-%d", i)
		_, err := c.CoreV1().Services(ns).Create(ctx, service(name, "", corev1.ServiceTypeClusterIP), metav1.CreateOptions{})
		must(err)
		_, err = c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		must(err)
		labels := map[string]string{"app": name}
		_, err = c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}, metav1.CreateOptions{})
		must(err)
		_, err = c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		must(err)
		_, err = c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}, metav1.CreateOptions{})
		must(err)
		_, err = c.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}},
			metav1.CreateOptions{})
		must(err)
	}
	return n
}

// TestNamespaceDeletion: deleting a namespace deletes its content in every
// resource, custom ones included, waits for an object's own finalizer with
// the upstream conditions, and touches no other plane.
func TestNamespaceDeletion(t *testing.T) {
	t.Parallel()
	s := shared
	a, b := uniquePlane(t, "nsdel-a"), uniquePlane(t, "nsdel-b")
	ctx := context.Background()
	ca, cb := s.Client(t, a), s.Client(t, b)
	crdYAML, err := os.ReadFile("testdata/rayservices-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s.MustKubectl(t, a, string(crdYAML), "apply", "-f", "-")
	waitEstablished(t, s, a, "rayservices.ray.example.com")

	for _, plane := range []struct {
		c    kubernetes.Interface
		name string
	}{{ca, a}, {cb, b}} {
		if _, err := plane.c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "work"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := fillNamespace(t, ca, "work"); n != 50 {
		t.Fatalf("wrote %d objects", n)
	}
	fillNamespace(t, cb, "work")
	dyn := s.Dynamic(t, a)
	for i := range 3 {
		u := rayService(fmt.Sprintf("ray-%d", i), "https://example.com/dag")
		u.SetNamespace("work")
		if _, err := dyn.Resource(rayGVR).Namespace("work").Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// One object holds the namespace with its own finalizer.
	held, err := ca.CoreV1().ConfigMaps("work").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := ca.CoreV1().Namespaces().Delete(ctx, "work", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Everything but the held object goes; the namespace reports why it stays.
	eventually(t, framework.DefaultTimeout, "content deleted and conditions reported", func() (bool, error) {
		ns, err := ca.CoreV1().Namespaces().Get(ctx, "work", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var remaining, finalizers bool
		for _, c := range ns.Status.Conditions {
			remaining = remaining || (c.Type == corev1.NamespaceContentRemaining && c.Status == corev1.ConditionTrue)
			finalizers = finalizers || (c.Type == corev1.NamespaceFinalizersRemaining && c.Status == corev1.ConditionTrue &&
				strings.Contains(c.Message, "example.com/hold"))
		}
		if !remaining || !finalizers {
			return false, fmt.Errorf("conditions %+v", ns.Status.Conditions)
		}
		left := 0
		for _, list := range []func() (int, error){
			func() (int, error) {
				l, err := ca.CoreV1().ConfigMaps("work").List(ctx, metav1.ListOptions{})
				return lenOr(l, err)
			},
			func() (int, error) {
				l, err := ca.CoreV1().Secrets("work").List(ctx, metav1.ListOptions{})
				return lenOr(l, err)
			},
			func() (int, error) {
				l, err := ca.AppsV1().Deployments("work").List(ctx, metav1.ListOptions{})
				return lenOr(l, err)
			},
			func() (int, error) {
				l, err := ca.BatchV1().Jobs("work").List(ctx, metav1.ListOptions{})
				return lenOr(l, err)
			},
			func() (int, error) {
				l, err := dyn.Resource(rayGVR).Namespace("work").List(ctx, metav1.ListOptions{})
				if err != nil {
					return 0, err
				}
				return len(l.Items), nil
			},
		} {
			n, err := list()
			if err != nil {
				return false, err
			}
			left += n
		}
		return left == 1, fmt.Errorf("%d objects left", left)
	})

	dropFinalizers[*corev1.ConfigMap](t, ca.CoreV1().ConfigMaps("work"), held.Name)
	released := time.Now()
	eventually(t, framework.DefaultTimeout, "namespace gone after the finalizer is removed", func() (bool, error) {
		_, err := ca.CoreV1().Namespaces().Get(ctx, "work", metav1.GetOptions{})
		return gone(err)
	})
	t.Logf("namespace gone %v after its last finalizer was removed", time.Since(released).Round(time.Millisecond))

	// The other plane's namespace of the same name is untouched.
	ns, err := cb.CoreV1().Namespaces().Get(ctx, "work", metav1.GetOptions{})
	if err != nil || ns.DeletionTimestamp != nil {
		t.Fatalf("plane %s namespace work: %v %v", b, err, ns)
	}
	cms, err := cb.CoreV1().ConfigMaps("work").List(ctx, metav1.ListOptions{})
	if err != nil || len(cms.Items) != 11 { // 10 + kube-root-ca.crt
		t.Fatalf("plane %s configmaps: %v, %d", b, err, len(cms.Items))
	}

	// A namespace of the same name can be created again.
	if _, err := ca.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "work"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func lenOr[T any](l *T, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	switch v := any(l).(type) {
	case *corev1.ConfigMapList:
		return len(v.Items), nil
	case *corev1.SecretList:
		return len(v.Items), nil
	case *appsv1.DeploymentList:
		return len(v.Items), nil
	case *batchv1.JobList:
		return len(v.Items), nil
	}
	return 0, fmt.Errorf("unexpected list %T", l)
}

// TestServiceAccountsAndRootCA: every namespace gets a default service
// account and the root CA ConfigMap, and gets them back when deleted.
func TestServiceAccountsAndRootCA(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "sa")
	c := s.Client(t, plane)
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease", "team"} {
		eventually(t, framework.DefaultTimeout, "default service account and root CA in "+ns, func() (bool, error) {
			if _, err := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return false, err
			}
			cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return cm.Data["ca.crt"] == string(s.CAPEM()), fmt.Errorf("ca.crt differs")
		})
	}
	if err := c.CoreV1().ServiceAccounts("team").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, _ := c.CoreV1().ConfigMaps("team").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	cm.Data["ca.crt"] = "tampered"
	if _, err := c.CoreV1().ConfigMaps("team").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, framework.DefaultTimeout, "default service account recreated and root CA restored", func() (bool, error) {
		if _, err := c.CoreV1().ServiceAccounts("team").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, err
		}
		cm, err := c.CoreV1().ConfigMaps("team").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cm.Data["ca.crt"] == string(s.CAPEM()), nil
	})
}

// ownedBy is an ownerReference to obj.
func ownedBy(apiVersion, kind string, obj metav1.Object, block bool) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: obj.GetName(), UID: obj.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(block)}}
}

// chain builds Deployment -> ReplicaSet -> Pod by hand (no deployment or
// replicaset controller runs in a plane).
func chain(t *testing.T, c kubernetes.Interface, ns, name string) (*appsv1.Deployment, *appsv1.ReplicaSet, *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": name}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	d, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-rs", OwnerReferences: ownedBy("apps/v1", "Deployment", d, true)},
		Spec:       appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-pod", Labels: labels, OwnerReferences: ownedBy("apps/v1", "ReplicaSet", rs, true)},
		Spec:       template.Spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d, rs, pod
}

// TestGarbageCollection: background, foreground and orphan cascades along
// Deployment -> ReplicaSet -> Pod and from a custom resource to ConfigMaps;
// dangling owners; an ownerReference naming another plane's object.
func TestGarbageCollection(t *testing.T) {
	t.Parallel()
	s := shared
	plane, other := uniquePlane(t, "gc"), uniquePlane(t, "gc-other")
	// Deployment -> ReplicaSet -> Pod are built by hand: the workload
	// controllers must not take them over.
	apiOnlyPlane(t, s, plane)
	c, co := s.Client(t, plane), s.Client(t, other)
	ctx := context.Background()
	ns := "default"

	t.Run("background", func(t *testing.T) {
		d, rs, pod := chain(t, c, ns, "bg")
		if err := c.AppsV1().Deployments(ns).Delete(ctx, d.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
		eventually(t, framework.DefaultTimeout, "replicaset and pod collected", func() (bool, error) {
			if _, err := c.AppsV1().ReplicaSets(ns).Get(ctx, rs.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, err
			}
			_, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return gone(err)
		})
	})

	t.Run("foreground", func(t *testing.T) {
		d, rs, pod := chain(t, c, ns, "fg")
		// A finalizer on the pod keeps the chain visible while the
		// deployment waits for its blocking dependents.
		pod.Finalizers = []string{"example.com/hold"}
		pod, err := c.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AppsV1().Deployments(ns).Delete(ctx, d.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
			t.Fatal(err)
		}
		eventually(t, framework.DefaultTimeout, "pod being deleted while owners wait", func() (bool, error) {
			p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil || p.DeletionTimestamp == nil {
				return false, err
			}
			for _, get := range []func() (metav1.Object, error){
				func() (metav1.Object, error) { return c.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{}) },
				func() (metav1.Object, error) {
					return c.AppsV1().ReplicaSets(ns).Get(ctx, rs.Name, metav1.GetOptions{})
				},
			} {
				o, err := get()
				if err != nil {
					return false, fmt.Errorf("owner gone before its blocking dependent: %w", err)
				}
				if o.GetDeletionTimestamp() == nil || !contains(o.GetFinalizers(), metav1.FinalizerDeleteDependents) {
					return false, fmt.Errorf("%s not waiting in the foreground: %v", o.GetName(), o.GetFinalizers())
				}
			}
			return true, nil
		})
		framework.Consistently(t, time.Second, "deployment kept while its replicaset blocks it", func(ctx context.Context) error {
			_, err := c.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
			return err
		})
		dropFinalizers[*corev1.Pod](t, c.CoreV1().Pods(ns), pod.Name)
		eventually(t, framework.DefaultTimeout, "whole chain gone", func() (bool, error) {
			_, err := c.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
			return gone(err)
		})
		if _, err := c.AppsV1().ReplicaSets(ns).Get(ctx, rs.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("replicaset: %v", err)
		}
	})

	t.Run("orphan", func(t *testing.T) {
		d, rs, pod := chain(t, c, ns, "or")
		if err := c.AppsV1().Deployments(ns).Delete(ctx, d.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
			t.Fatal(err)
		}
		eventually(t, framework.DefaultTimeout, "deployment gone, replicaset orphaned", func() (bool, error) {
			if _, err := c.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, err
			}
			got, err := c.AppsV1().ReplicaSets(ns).Get(ctx, rs.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return len(got.OwnerReferences) == 0, fmt.Errorf("owner references %v", got.OwnerReferences)
		})
		framework.Consistently(t, time.Second, "pod of the orphaned replicaset kept with its owner", func(ctx context.Context) error {
			p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(p.OwnerReferences) != 1 {
				return fmt.Errorf("owner references %v", p.OwnerReferences)
			}
			return nil
		})
	})

	t.Run("custom resource owner", func(t *testing.T) {
		crdYAML, err := os.ReadFile("testdata/rayservices-crd.yaml")
		if err != nil {
			t.Fatal(err)
		}
		s.MustKubectl(t, plane, string(crdYAML), "apply", "-f", "-")
		waitEstablished(t, s, plane, "rayservices.ray.example.com")
		dyn := s.Dynamic(t, plane)
		for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
			name := "ray-" + strings.ToLower(string(policy))
			u := rayService(name, "https://example.com/dag")
			owner, err := dyn.Resource(rayGVR).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("%s-%d", name, i), OwnerReferences: ownedBy("ray.example.com/v1", "RayService", owner, true)}},
					metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := dyn.Resource(rayGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
				t.Fatal(err)
			}
			eventually(t, framework.DefaultTimeout, string(policy)+" from a custom resource", func() (bool, error) {
				if _, err := dyn.Resource(rayGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return false, fmt.Errorf("owner still there: %v", err)
				}
				for i := range 2 {
					cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, fmt.Sprintf("%s-%d", name, i), metav1.GetOptions{})
					if policy == metav1.DeletePropagationOrphan {
						if err != nil || len(cm.OwnerReferences) != 0 {
							return false, fmt.Errorf("orphan: %v", err)
						}
					} else if !apierrors.IsNotFound(err) {
						return false, err
					}
				}
				return true, nil
			})
		}
	})

	t.Run("dangling owner and another plane's uid", func(t *testing.T) {
		victim, err := co.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "victim"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Plane "other" has a legitimate dependent of victim, too.
		if _, err := co.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: "victim-dep", OwnerReferences: ownedBy("v1", "ConfigMap", victim, false)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// In plane, a same-named owner exists, but the reference carries
		// the other plane's uid: the owner is absent here.
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "victim"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "forged", OwnerReferences: ownedBy("v1", "ConfigMap", victim, true)}}
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, forged, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		dangling := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dangling", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Secret", Name: "never", UID: types.UID("5f0c8a3e-0000-4000-8000-000000000001")}}}}
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, dangling, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, framework.DefaultTimeout, "dependents of absent owners collected", func() (bool, error) {
			if _, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "forged", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, err
			}
			_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "dangling", metav1.GetOptions{})
			return gone(err)
		})
		for _, name := range []string{"victim", "victim-dep"} {
			if _, err := co.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Fatalf("plane %s lost %s: %v", other, name, err)
			}
		}
		if _, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "victim", metav1.GetOptions{}); err != nil {
			t.Fatalf("same-named owner in %s: %v", plane, err)
		}
		// Deleting the owner in its own plane collects only that plane's dependent.
		if err := co.CoreV1().ConfigMaps(ns).Delete(ctx, "victim", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, framework.DefaultTimeout, "dependent collected in its own plane", func() (bool, error) {
			_, err := co.CoreV1().ConfigMaps(ns).Get(ctx, "victim-dep", metav1.GetOptions{})
			return gone(err)
		})
	})
}

type patcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// dropFinalizers removes every finalizer of an object, whatever changed it
// meanwhile.
func dropFinalizers[T any](t *testing.T, client patcher[T], name string) {
	t.Helper()
	_, err := client.Patch(context.Background(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// namespaceCondition: ns reports condition kind as true.
func namespaceCondition(ns *corev1.Namespace, kind corev1.NamespaceConditionType) bool {
	for _, c := range ns.Status.Conditions {
		if c.Type == kind && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestNamespaceDeletionAcrossRestart: a server killed in the middle of a
// large namespace deletion finishes it after a restart, and the work that
// was done (default service accounts) is not redone.
func TestNamespaceDeletionAcrossRestart(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	plane := "big"
	c := s.Client(t, plane)
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "big"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const objects = 400
	var wg sync.WaitGroup
	errs := make(chan error, objects)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < objects; i += 8 {
				_, err := c.CoreV1().ConfigMaps("big").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("cm-%03d", i)}, Data: map[string]string{"k": strings.Repeat("v", 512)}}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	held, err := c.CoreV1().Secrets("big").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var sa *corev1.ServiceAccount
	eventually(t, framework.DefaultTimeout, "default service account", func() (bool, error) {
		sa, err = c.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})

	if err := c.CoreV1().Namespaces().Delete(ctx, "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Kill in the middle of the deletion: once some content is gone.
	framework.Eventually(t, framework.DefaultTimeout, "namespace deletion under way", func(ctx context.Context) error {
		cms, err := c.CoreV1().ConfigMaps("big").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(cms.Items) == objects {
			return fmt.Errorf("all %d configmaps still there", objects)
		}
		return nil
	})
	s.Kill()
	s.Restart(t)
	c = s.Client(t, plane)

	eventually(t, framework.DefaultTimeout, "content deleted after the restart", func() (bool, error) {
		cms, err := c.CoreV1().ConfigMaps("big").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(cms.Items) == 0, fmt.Errorf("%d configmaps left", len(cms.Items))
	})
	dropFinalizers[*corev1.Secret](t, c.CoreV1().Secrets("big"), held.Name)
	eventually(t, framework.DefaultTimeout, "namespace gone", func() (bool, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, "big", metav1.GetOptions{})
		return gone(err)
	})
	after, err := c.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
	if err != nil || after.ResourceVersion != sa.ResourceVersion {
		t.Fatalf("default service account rewritten after restart: %v (%s -> %s)", err, sa.ResourceVersion, after.ResourceVersion)
	}
}

// TestControllersSurvivePlaneDeletion: a plane deleted while controllers
// hold work for it (a namespace waiting on a finalizer, an owner deleted in
// the foreground) is gone for good: no controller brings it back. The work
// queues are in /metrics.
func TestControllersSurvivePlaneDeletion(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "midwork")
	apiOnlyPlane(t, s, plane)
	c := s.Client(t, plane)
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "w"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps("w").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d, _, pod := chain(t, c, "default", "mid")
	dropFinalizers[*corev1.Pod](t, c.CoreV1().Pods("default"), pod.Name)
	if _, err := c.CoreV1().Pods("default").Patch(ctx, pod.Name, types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":["example.com/hold"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.AppsV1().Deployments("default").Delete(ctx, d.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Namespaces().Delete(ctx, "w", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Delete the plane once the controllers hold work for it.
	framework.Eventually(t, framework.DefaultTimeout, "controllers holding work", func(ctx context.Context) error {
		ns, err := c.CoreV1().Namespaces().Get(ctx, "w", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !namespaceCondition(ns, corev1.NamespaceFinalizersRemaining) {
			return fmt.Errorf("namespace w: conditions %+v", ns.Status.Conditions)
		}
		p, err := c.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.DeletionTimestamp == nil {
			return fmt.Errorf("pod %s not being deleted in the foreground yet", p.Name)
		}
		return nil
	})
	if out, err := kplaneCmd(t, s, "planes", "delete", plane); err != nil {
		t.Fatalf("kplane planes delete: %v\n%s", err, out)
	}
	planes := s.Dynamic(t, "root").Resource(planeGVR)
	eventually(t, framework.DefaultTimeout, "plane "+plane+" deleted", func() (bool, error) {
		_, err := planes.Get(ctx, plane, metav1.GetOptions{})
		return gone(err)
	})
	// Leftover work runs (and fails) meanwhile: the plane must not come back.
	framework.Consistently(t, 3*time.Second, "plane "+plane+" stays deleted", func(ctx context.Context) error {
		if _, err := planes.Get(ctx, plane, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("plane came back: %v", err)
		}
		return nil
	})
	req, _ := http.NewRequest(http.MethodGet, s.PlaneURL(plane)+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+s.AdminToken())
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("readyz of the deleted plane: %d", resp.StatusCode)
	}

	metrics := s.MustKubectl(t, "root", "", "get", "--raw", "/metrics")
	for _, name := range []string{"kplane_namespace", "kplane_garbage_collector", "kplane_serviceaccounts"} {
		if !strings.Contains(metrics, `workqueue_depth{name="`+name+`"}`) {
			t.Errorf("/metrics has no work-queue depth of %s", name)
		}
	}
}
