package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestAdmissionFromTemplate: a member holds no admission object of its
// own, and the ones it inherits from its template act on its requests: the
// template's ValidatingAdmissionPolicy and binding, its
// ValidatingWebhookConfiguration, its LimitRange and its ResourceQuota,
// whose usage follows the member's creates and deletes as a copy's would.
// A plain plane next to it is admitted by none of them.
func TestAdmissionFromTemplate(t *testing.T) {
	t.Parallel()
	s := shared
	template, member, deleter, plain := uniquePlane(t, "adm-template"), uniquePlane(t, "adm-member"),
		uniquePlane(t, "adm-deleter"), uniquePlane(t, "adm-plain")
	ct := s.Client(t, template)
	quotaNamespace(t, ct, "work")
	seedAdmission(t, ct)
	// As upstream, a create charges a quota that admission already sees:
	// the controller's first calculation says it is there.
	waitUsed(t, ct, "work", "q", map[corev1.ResourceName]int64{"count/configmaps": 1})
	if err := createConfigMap(context.Background(), ct, "work", "cm-t"); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ct, "work", "q", map[corev1.ResourceName]int64{"count/configmaps": 2})
	for _, p := range []string{member, deleter} {
		createPlane(t, s, p, template)
	}
	createPlane(t, s, plain, "")
	cm, cp := s.Client(t, member), s.Client(t, plain)
	quotaNamespace(t, cp, "work")

	// A delete of an inherited object gives its room back.
	cd := s.Client(t, deleter)
	if err := cd.CoreV1().ConfigMaps("work").Delete(context.Background(), "cm-t", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, cd, "work", "q", map[corev1.ResourceName]int64{"count/configmaps": 1})

	red := labelledConfigMap("red", map[string]string{"red": "yes"})
	framework.Eventually(t, framework.DefaultTimeout, "the template's policy refuses in the member", func(ctx context.Context) error {
		return refused(ctx, cm, red, apierrors.IsInvalid, "no-red")
	})
	called := labelledConfigMap("called", map[string]string{"webhook": "call"})
	framework.Eventually(t, framework.DefaultTimeout, "the template's webhook is called in the member", func(ctx context.Context) error {
		return refused(ctx, cm, called, func(error) bool { return true }, `"check.kplane.dev"`)
	})
	pod, err := cm.CoreV1().Pods("work").Create(context.Background(), bareAdmissionPod(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Spec.Containers[0].Resources.Requests.Cpu().String(); got != "100m" {
		t.Fatalf("the template's LimitRange did not default the member's Pod: cpu request %q", got)
	}
	// The member's first create charged to the inherited quota writes the
	// member's own copy of it: that is no new quota to calculate again
	// (from a cache that may not hold the create yet).
	if err := createConfigMap(context.Background(), cm, "work", "cm-1"); err != nil {
		t.Fatalf("ConfigMap 3 of the quota's 4: %v", err)
	}
	waitUsed(t, cm, "work", "q", map[corev1.ResourceName]int64{"count/configmaps": 3})
	if err := createConfigMap(context.Background(), cm, "work", "cm-2"); err != nil {
		t.Fatalf("ConfigMap 4 of the quota's 4: %v", err)
	}
	if err := createConfigMap(context.Background(), cm, "work", "cm-3"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: q") {
		t.Fatalf("5th ConfigMap in the member: got %v, want 403 exceeded quota: q", err)
	}

	for _, obj := range []*corev1.ConfigMap{red, called} {
		if _, err := cp.CoreV1().ConfigMaps("work").Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("plane %s (no template) refused ConfigMap %s: %v", plain, obj.Name, err)
		}
	}
	pod, err = cp.CoreV1().Pods("work").Create(context.Background(), bareAdmissionPod(), metav1.CreateOptions{})
	if err != nil || len(pod.Spec.Containers[0].Resources.Requests) != 0 {
		t.Fatalf("plane %s (no template): Pod %v, requests %v", plain, err, pod.Spec.Containers[0].Resources.Requests)
	}
}

// seedAdmission creates in namespace work of a plane: a policy refusing
// ConfigMaps labelled red, a webhook (to an address nothing answers, so
// each call fails) for ConfigMaps labelled webhook=call, a LimitRange
// defaulting containers' requests and a quota of 4 ConfigMaps.
func seedAdmission(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	createValidatingPolicy(t, c, denyLabelPolicy("no-red", "red", admissionregistrationv1.Fail), policyBinding("no-red", "no-red", admissionregistrationv1.Deny))
	hook := validatingHook("hook", admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/never")})
	hook.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"webhook": "call"}}
	if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, hook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "lr"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type:           corev1.LimitTypeContainer,
		DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
	}}}}
	if _, err := c.CoreV1().LimitRanges("work").Create(ctx, lr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ResourceQuotas("work").Create(ctx, configMapQuota(4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// refused creates obj in namespace work and returns nil if the create was
// refused with an error that is and names what is wanted; an admitted
// object is deleted again.
func refused(ctx context.Context, c kubernetes.Interface, obj *corev1.ConfigMap, is func(error) bool, names string) error {
	_, err := c.CoreV1().ConfigMaps("work").Create(ctx, obj, metav1.CreateOptions{})
	if err == nil {
		_ = c.CoreV1().ConfigMaps("work").Delete(ctx, obj.Name, metav1.DeleteOptions{})
		return fmt.Errorf("ConfigMap %s admitted", obj.Name)
	}
	if !is(err) || !strings.Contains(err.Error(), names) {
		return fmt.Errorf("ConfigMap %s: got %v, want an error naming %s", obj.Name, err, names)
	}
	return nil
}

func bareAdmissionPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "bare-"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
}
