package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestResetAcrossServers: two servers on one etcd. A plane reset through
// either one is reset for both: afterwards both serve it at once (no
// request held on the server that did not reset it), neither serves what
// the reset dropped, and what is written after the reset, through either
// server, stays (no second wipe). A reset whose server died in the
// middle is finished by the plane lifecycle's holder.
func TestResetAcrossServers(t *testing.T) {
	t.Parallel()
	one, two := startTwoServers(t, framework.StartEtcd(t), "--simulation=false")
	const plane = "reset-across"
	createPlane(t, one, plane, "")
	servers := map[string]*framework.Server{"first": one, "second": two}
	for _, through := range []string{"second", "first"} {
		ctx, cancel := context.WithTimeout(context.Background(), framework.DefaultTimeout)
		for name, s := range servers {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-" + name}}
			if _, err := s.Client(t, plane).CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if code := resetPlane(t, servers[through], plane); code != http.StatusOK {
			t.Fatalf("reset through the %s server: %d", through, code)
		}
		for name, s := range servers {
			c := s.Client(t, plane)
			quick, stop := context.WithTimeout(ctx, 5*time.Second)
			for _, before := range []string{"before-first", "before-second"} {
				if _, err := c.CoreV1().ConfigMaps("default").Get(quick, before, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Fatalf("after a reset through the %s server, the %s server answers %s with %v, want 404 at once", through, name, before, err)
				}
			}
			stop()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-" + name}}
			if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for name, s := range servers {
			list, err := s.Client(t, plane).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, cm := range list.Items {
				names = append(names, cm.Name)
			}
			if fmt.Sprint(names) != "[after-first after-second kube-root-ca.crt]" {
				t.Fatalf("after a reset through the %s server, the %s server lists %v", through, name, names)
			}
		}
		for name, s := range servers {
			for _, after := range []string{"after-first", "after-second"} {
				if err := s.Client(t, plane).CoreV1().ConfigMaps("default").Delete(ctx, after, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
		cancel()
	}
	// Each server did the one reset it was asked for, and let the other's
	// through without wiping the plane a second time.
	// (The other server logs its release when its informer sees the mark
	// go, which may be after the reset's answer.)
	for name, s := range servers {
		framework.Eventually(t, framework.DefaultTimeout, "the "+name+" server's log of the two resets", func(context.Context) error {
			own, other := strings.Count(s.Log(), `msg="plane reset"`), strings.Count(s.Log(), "plane reset by another server")
			err := fmt.Errorf("the %s server logged %d resets of its own and %d ended by the other, want 1 and 1", name, own, other)
			switch {
			case own > 1 || other > 1:
				return framework.Stop(err)
			case own < 1 || other < 1:
				return err
			}
			return nil
		})
	}

	// Each reset waited for the other server to hold the plane: the
	// Plane carries each server's word for the reset it held for.
	p, err := one.Dynamic(t, "root").Resource(planesGVR).Get(context.Background(), plane, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for key := range p.GetAnnotations() {
		if strings.HasPrefix(key, "reset-held.kplane.dev/") {
			held++
		}
	}
	if held != 2 {
		t.Errorf("the Plane says %d servers held it for a reset, want 2 (one per reset): %v", held, p.GetAnnotations())
	}
	// And where the last reset's deletions are, for the other server's
	// caches to reach before it lets the plane's requests in: the
	// ConfigMaps it deleted among them.
	if caches := p.GetAnnotations()["kplane.dev/reset-caches"]; !strings.Contains(caches, "/configmaps=") {
		t.Errorf("the Plane's kplane.dev/reset-caches is %q, want the revision of the reset's last ConfigMap deletion", caches)
	}

	// A reset begun by a server that died in the middle (its mark left on
	// the Plane long ago) is finished by the plane lifecycle's holder, and
	// every server serves the plane again.
	ctx := context.Background()
	if _, err := two.Client(t, plane).CoreV1().ConfigMaps("default").Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-the-dead-server"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mark := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano) + " a-server-gone"
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"kplane.dev/resetting":%q}}}`, mark)
	if _, err := one.Dynamic(t, "root").Resource(planesGVR).Patch(ctx, plane, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, s := range servers {
		c := s.Client(t, plane)
		framework.Eventually(t, framework.DefaultTimeout, "the dead server's reset finished, seen through the "+name+" server", func(ctx context.Context) error {
			quick, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := c.CoreV1().ConfigMaps("default").Get(quick, "before-the-dead-server", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("before-the-dead-server: %v", err)
			}
			return nil
		})
	}
}
