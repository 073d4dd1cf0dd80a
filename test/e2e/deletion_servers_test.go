package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestPlaneDeletionWaitsForEveryServer: a write in flight on one server
// when the plane's deletion begins on another is finished before the
// plane's objects are wiped, so the plane made again under the same id
// holds nothing of it.
func TestPlaneDeletionWaitsForEveryServer(t *testing.T) {
	t.Parallel()
	servers := startServersOnEtcd(t, 2)
	byName := map[string]*framework.Server{"s1": servers[0], "s2": servers[1]}
	holder := requireHolders(t, byName, "")["kplane-planes"]
	a := byName[holder]
	var b *framework.Server
	for name, s := range byName {
		if name != holder {
			b = s
		}
	}
	const plane = "drained-everywhere"
	createPlane(t, a, plane, "")
	ca, cb := a.Client(t, plane), b.Client(t, plane)
	// A webhook that holds a labelled ConfigMap's create until released;
	// past its timeout the create goes on (Ignore), as a slow write would.
	hook := startHookServer(t)
	release := sync.OnceFunc(func() { close(hook.release) })
	// Before the hook server's close, which waits for the held call.
	t.Cleanup(release)
	cfg := validatingHook("slow", admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.url + "/slow/drain"), CABundle: hook.caBundle})
	cfg.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"slow": "true"}}
	cfg.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	cfg.Webhooks[0].TimeoutSeconds = ptr.To(int32(30))
	if _, err := ca.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(t.Context(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := createHeld(t, hook, "a create through the other server", func(ctx context.Context) error {
		_, err := cb.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap("late", map[string]string{"slow": "true"}), metav1.CreateOptions{})
		return err
	}, func(ctx context.Context) error {
		return cb.CoreV1().ConfigMaps("default").Delete(ctx, "late", metav1.DeleteOptions{})
	})

	planes := a.Dynamic(t, "root").Resource(planesGVR)
	if err := planes.Delete(t.Context(), plane, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Consistently(t, 3*time.Second, "the deletion waits for the other server's request", func(ctx context.Context) error {
		_, err := planes.Get(ctx, plane, metav1.GetOptions{})
		return err
	})
	release()
	select {
	case err := <-done:
		t.Logf("the held create ended: %v", err)
	case <-time.After(framework.DefaultTimeout):
		t.Fatal("the held create did not end once released")
	}
	eventually(t, framework.DefaultTimeout, "plane "+plane+" deleted", func() (bool, error) {
		_, err := planes.Get(t.Context(), plane, metav1.GetOptions{})
		return gone(err)
	})
	createPlane(t, a, plane, "")
	if _, err := a.Client(t, plane).CoreV1().ConfigMaps("default").Get(t.Context(), "late", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the plane made again holds the write of the deleted one: %v", err)
	}
}
