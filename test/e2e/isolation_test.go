package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/test/e2e/framework"
)

func TestIsolation(t *testing.T) {
	t.Parallel()
	isolationSuite(t, shared)
}

// isolationSuite checks that two planes on s share nothing: same-named
// objects hold their own data through get, list, watch, server-side apply
// and paging; namespaces and cluster-scoped objects are per plane; a watch
// in one plane sees no event of the other. s is one server or a
// round-robin of several.
func isolationSuite(t *testing.T, s planeClients) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b := uniquePlane(t, "iso-a"), uniquePlane(t, "iso-b")
	ca, cb := s.Client(t, a), s.Client(t, b)

	// Watches opened before any write: they must see only their own plane.
	wa, err := ca.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch in %s: %v", a, err)
	}
	defer wa.Stop()
	wb, err := cb.CoreV1().ConfigMaps(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch in %s: %v", b, err)
	}
	defer wb.Stop()

	// Same names, different data.
	for plane, c := range map[string]interface {
		Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
	}{a: ca.CoreV1().ConfigMaps("default"), b: cb.CoreV1().ConfigMaps("default")} {
		for i := 0; i < 5; i++ {
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)},
				Data:       map[string]string{"plane": plane},
			}
			if _, err := c.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create in %s: %v", plane, err)
			}
		}
	}
	for plane, c := range map[string]*kubernetes.Clientset{a: ca, b: cb} {
		got, err := c.CoreV1().ConfigMaps("default").Get(ctx, "cm-0", metav1.GetOptions{})
		if err != nil || got.Data["plane"] != plane {
			t.Fatalf("get in %s: %v %v", plane, got.Data, err)
		}
		list, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, cm := range list.Items {
			if cm.Annotations["kplane.dev/plane"] != plane {
				t.Fatalf("list in %s returned %s/%s of plane %q", plane, cm.Namespace, cm.Name, cm.Annotations["kplane.dev/plane"])
			}
			if cm.Name == "kube-root-ca.crt" {
				continue
			}
			if cm.Data["plane"] != plane {
				t.Fatalf("list in %s returned %s/%s of plane %q", plane, cm.Namespace, cm.Name, cm.Data["plane"])
			}
			names = append(names, cm.Name)
		}
		if len(names) != 5 {
			t.Fatalf("list in %s: %v", plane, names)
		}
		// Consistent and cached lists agree, once the cache has the writes
		// just made: a read at resourceVersion 0 may trail them (kine on
		// PostgreSQL learns of its writes by polling).
		eventually(t, framework.DefaultTimeout, "cached list in "+plane, func() (bool, error) {
			cached, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				return false, err
			}
			return len(cached.Items) == 6, fmt.Errorf("%d items", len(cached.Items))
		})
	}

	// Server-side apply in one plane leaves the other's object alone.
	applied, err := ca.CoreV1().ConfigMaps("default").Apply(ctx,
		corev1apply.ConfigMap("cm-0", "default").WithData(map[string]string{"plane": a, "applied": "yes"}),
		metav1.ApplyOptions{FieldManager: "e2e", Force: true})
	if err != nil || applied.Data["applied"] != "yes" {
		t.Fatalf("apply in %s: %v", a, err)
	}
	if other, _ := cb.CoreV1().ConfigMaps("default").Get(ctx, "cm-0", metav1.GetOptions{}); other.Data["applied"] != "" {
		t.Fatalf("apply in %s changed %s", a, b)
	}

	// Paging: a continue token is only meaningful inside its plane.
	page, err := ca.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 2})
	if err != nil || page.Continue == "" {
		t.Fatalf("paged list: %v continue=%q", err, page.Continue)
	}
	seen := map[string]bool{}
	for _, cm := range page.Items {
		seen[cm.Name] = true
	}
	cont := page.Continue
	for cont != "" {
		next, err := ca.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 2, Continue: cont})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range next.Items {
			if cm.Annotations["kplane.dev/plane"] != a {
				t.Fatalf("page returned object of plane %q", cm.Data["plane"])
			}
			seen[cm.Name] = true
		}
		cont = next.Continue
	}
	delete(seen, "kube-root-ca.crt")
	if len(seen) != 5 {
		t.Fatalf("paging saw %d objects", len(seen))
	}
	// The same continue token presented to plane b only ever pages b.
	cross, err := cb.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 2, Continue: page.Continue})
	if err == nil {
		for _, cm := range cross.Items {
			if cm.Annotations["kplane.dev/plane"] != b {
				t.Fatalf("continue token of %s yielded an object of plane %q in %s", a, cm.Data["plane"], b)
			}
		}
	} else if !apierrors.IsBadRequest(err) && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("continue token of %s in %s: %v", a, b, err)
	}

	// Namespaces are per plane.
	if _, err := ca.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-in-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.CoreV1().Namespaces().Get(ctx, "only-in-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace of %s visible in %s: %v", a, b, err)
	}
	_, err = cb.CoreV1().ConfigMaps("only-in-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("create in a namespace that exists only in %s, from %s: want NotFound, got %v", a, b, err)
	}
	for plane, c := range map[string]*kubernetes.Clientset{a: ca, b: cb} {
		nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, ns := range nss.Items {
			names = append(names, ns.Name)
		}
		sort.Strings(names)
		want := "default,kube-node-lease,kube-public,kube-system"
		if plane == a {
			want = "default,kube-node-lease,kube-public,kube-system,only-in-a"
		}
		if strings.Join(names, ",") != want {
			t.Fatalf("namespaces of %s: %v, want %s", plane, names, want)
		}
	}

	// Cluster-scoped objects are per plane.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "iso-role"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
	if _, err := ca.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.RbacV1().ClusterRoles().Get(ctx, "iso-role", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("cluster role of %s visible in %s: %v", a, b, err)
	}

	// Patches and deletes stay in their plane.
	if _, err := cb.CoreV1().ConfigMaps("default").Patch(ctx, "cm-1", types.MergePatchType, []byte(`{"data":{"patched":"b"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cb.CoreV1().ConfigMaps("default").Delete(ctx, "cm-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := ca.CoreV1().ConfigMaps("default").Get(ctx, "cm-2", metav1.GetOptions{}); err != nil || got.Data["patched"] != "" {
		t.Fatalf("delete/patch in %s reached %s: %v", b, a, err)
	}

	// Each watch saw exactly its own plane's events.
	expectOnlyPlane(t, wa, a, 6) // 5 creates + 1 apply
	expectOnlyPlane(t, wb, b, 7) // 5 creates + patch + delete
}

// planeClients gives admin clients of a plane: a framework.Server, or a
// framework.RoundRobin spreading the requests over several.
type planeClients interface {
	Client(tb testing.TB, plane string) *kubernetes.Clientset
}

func expectOnlyPlane(t *testing.T, w watch.Interface, plane string, want int) {
	t.Helper()
	got := 0
	timeout := time.After(framework.DefaultTimeout)
	for got < want {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch of %s closed after %d events", plane, got)
			}
			cm, isCM := ev.Object.(*corev1.ConfigMap)
			if !isCM {
				t.Fatalf("watch of %s: unexpected %T %v", plane, ev.Object, ev.Object)
			}
			if cm.Name == "kube-root-ca.crt" && cm.Annotations["kplane.dev/plane"] == plane {
				continue
			}
			if cm.Data["plane"] != plane || cm.Annotations["kplane.dev/plane"] != plane {
				t.Fatalf("watch of %s received %s of %s/%s (plane %q)", plane, ev.Type, cm.Namespace, cm.Name, cm.Data["plane"])
			}
			got++
		case <-timeout:
			t.Fatalf("watch of %s: %d events, want %d", plane, got, want)
		}
	}
	framework.Consistently(t, time.Second, "watch of "+plane+" quiet after its own events", func(context.Context) error {
		select {
		case ev := <-w.ResultChan():
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && cm.Name == "kube-root-ca.crt" && cm.Annotations["kplane.dev/plane"] == plane {
				return nil
			}
			return fmt.Errorf("unexpected extra event %s %v", ev.Type, ev.Object)
		default:
			return nil
		}
	})
}
