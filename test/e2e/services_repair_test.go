package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestServiceAddressLeakRepaired: a server killed -9 while a Service's
// create waits in a validating webhook has allocated its ClusterIP and
// NodePort (allocation comes before admission) and never stores the
// Service. Without the repair (--service-repair-interval 0) the plane
// keeps both addresses for good: another Service asking for them is
// refused "already allocated". With it, the addresses are free again
// after three checks, while a stored Service's stay taken.
func TestServiceAddressLeakRepaired(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{Args: []string{"--service-repair-interval", "0"}})
	const plane = "leaky-addresses"
	createPlane(t, s, plane, "")
	svcs := s.Client(t, plane).CoreV1().Services("default")
	kept := service("kept", "10.96.77.78", corev1.ServiceTypeClusterIP)
	if _, err := svcs.Create(t.Context(), kept, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	held := nodePortService("leaky", "10.96.77.77", 30777)
	held.Labels = map[string]string{"slow": "true"}
	release := holdServiceCreate(t, s, plane, held)

	s.Kill()
	release()
	s.Restart(t)
	if _, err := svcs.Get(t.Context(), "leaky", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the create cut short by the kill was stored: %v", err)
	}
	for name, svc := range map[string]*corev1.Service{
		"the leaked ClusterIP": service("taker-ip", "10.96.77.77", corev1.ServiceTypeClusterIP),
		"the leaked NodePort":  nodePortService("taker-port", "", 30777),
	} {
		if _, err := svcs.Create(t.Context(), svc, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already allocated") {
			t.Fatalf("%s without the repair: want Invalid 'already allocated', got %v", name, err)
		}
	}

	s.Stop()
	s.Args = []string{"--service-repair-interval", "1s"}
	s.Restart(t)
	framework.Eventually(t, framework.DefaultTimeout, "the leaked ClusterIP and NodePort taken again", func(ctx context.Context) error {
		_, err := svcs.Create(ctx, nodePortService("taker", "10.96.77.77", 30777), metav1.CreateOptions{})
		if err != nil && !strings.Contains(err.Error(), "already allocated") {
			return framework.Stop(err)
		}
		return err
	})
	if !strings.Contains(s.Log(), "repaired service address allocations") {
		t.Fatal("the server did not log the repair")
	}
	_, err := svcs.Create(t.Context(), service("dup", "10.96.77.78", corev1.ServiceTypeClusterIP), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already allocated") {
		t.Fatalf("the address of a stored Service after the repair: want Invalid 'already allocated', got %v", err)
	}
}

// nodePortService is a NodePort Service with the given ClusterIP (or any)
// and node port.
func nodePortService(name, clusterIP string, nodePort int32) *corev1.Service {
	svc := service(name, clusterIP, corev1.ServiceTypeNodePort)
	svc.Spec.Ports[0].NodePort = nodePort
	return svc
}

// holdServiceCreate creates svc (labelled slow=true) in plane's default
// namespace and returns once its create waits in a validating webhook,
// which answers once release is called.
func holdServiceCreate(t *testing.T, s *framework.Server, plane string, svc *corev1.Service) (release func()) {
	t.Helper()
	hook := startHookServer(t)
	release = sync.OnceFunc(func() { close(hook.release) })
	// Before the hook server's close, which waits for the held call.
	t.Cleanup(release)
	cfg := validatingHook("slow-services", admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.url + "/slow/leak"), CABundle: hook.caBundle})
	cfg.Webhooks[0].Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"services"}},
	}}
	cfg.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"slow": "true"}}
	cfg.Webhooks[0].TimeoutSeconds = ptr.To(int32(30))
	c := s.Client(t, plane)
	if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(t.Context(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createHeld(t, hook, "the create of Service "+svc.Name, func(ctx context.Context) error {
		_, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		return err
	}, func(ctx context.Context) error {
		return c.CoreV1().Services("default").Delete(ctx, svc.Name, metav1.DeleteOptions{})
	})
	return release
}
