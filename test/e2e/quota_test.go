package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/test/e2e/framework"
)

// quotaNamespace creates namespace ns in the plane of c and waits for its
// kube-root-ca.crt ConfigMap, which counts against a configmaps quota.
func quotaNamespace(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "kube-root-ca.crt in "+ns, func(ctx context.Context) error {
		_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
}

func configMapQuota(hard int) *corev1.ResourceQuota {
	n := resource.MustParse(fmt.Sprint(hard))
	return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": n, corev1.ResourceConfigMaps: n}}}
}

// waitUsed waits until the quota's status.used holds want for every name.
func waitUsed(t *testing.T, c kubernetes.Interface, ns, name string, want map[corev1.ResourceName]int64) {
	t.Helper()
	framework.Eventually(t, framework.DefaultTimeout, fmt.Sprintf("quota %s/%s used %v", ns, name, want), func(ctx context.Context) error {
		q, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for res, n := range want {
			used, ok := q.Status.Used[res]
			if !ok || used.Value() != n {
				return fmt.Errorf("used %v", q.Status.Used)
			}
		}
		return nil
	})
}

func createConfigMap(ctx context.Context, c kubernetes.Interface, ns, name string) error {
	_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

// TestResourceQuotaPerPlane: a quota refuses what exceeds it with
// upstream's 403, its status.used follows creates and deletes, and it acts
// in its own plane only: a quota of the same name in another plane counts
// that plane's objects, and a plane without one is not limited.
func TestResourceQuotaPerPlane(t *testing.T) {
	t.Parallel()
	s := shared
	a, b, free := uniquePlane(t, "quota-a"), uniquePlane(t, "quota-b"), uniquePlane(t, "quota-free")
	ctx := context.Background()
	ca, cb, cfree := s.Client(t, a), s.Client(t, b), s.Client(t, free)
	for _, c := range []kubernetes.Interface{ca, cb, cfree} {
		quotaNamespace(t, c, "work")
	}
	if _, err := ca.CoreV1().ResourceQuotas("work").Create(ctx, configMapQuota(3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.CoreV1().ResourceQuotas("work").Create(ctx, configMapQuota(10), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-root-ca.crt is the first ConfigMap of each namespace.
	waitUsed(t, ca, "work", "q", map[corev1.ResourceName]int64{"count/configmaps": 1, "configmaps": 1})
	waitUsed(t, cb, "work", "q", map[corev1.ResourceName]int64{"count/configmaps": 1, "configmaps": 1})

	for i := 1; i <= 2; i++ {
		if err := createConfigMap(ctx, ca, "work", fmt.Sprintf("cm-%d", i)); err != nil {
			t.Fatalf("ConfigMap %d of 3: %v", i+1, err)
		}
	}
	waitUsed(t, ca, "work", "q", map[corev1.ResourceName]int64{"count/configmaps": 3, "configmaps": 3})

	// The 4th is refused with upstream's message.
	err := createConfigMap(ctx, ca, "work", "cm-3")
	want := `configmaps "cm-3" is forbidden: exceeded quota: q, requested: configmaps=1,count/configmaps=1, ` +
		`used: configmaps=3,count/configmaps=3, limited: configmaps=3,count/configmaps=3`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Fatalf("4th ConfigMap: got %v, want 403 %q", err, want)
	}
	out, err := s.Kubectl(t, a, "", "create", "configmap", "cm-3", "-n", "work")
	if err == nil || !strings.Contains(out, "exceeded quota: q") {
		t.Fatalf("kubectl create of the 4th ConfigMap: %v\n%s", err, out)
	}

	// Plane B's quota of the same name counts B's objects only, and plane
	// A's never limits B or a plane without quotas.
	for i := 1; i <= 5; i++ {
		if err := createConfigMap(ctx, cb, "work", fmt.Sprintf("cm-%d", i)); err != nil {
			t.Fatalf("plane %s, ConfigMap %d: %v", b, i, err)
		}
		if err := createConfigMap(ctx, cfree, "work", fmt.Sprintf("cm-%d", i)); err != nil {
			t.Fatalf("plane %s, ConfigMap %d: %v", free, i, err)
		}
	}
	waitUsed(t, cb, "work", "q", map[corev1.ResourceName]int64{"count/configmaps": 6, "configmaps": 6})
	if q, err := ca.CoreV1().ResourceQuotas("work").Get(ctx, "q", metav1.GetOptions{}); err != nil || q.Status.Used.Name("count/configmaps", resource.DecimalSI).Value() != 3 {
		t.Fatalf("plane %s's quota after plane %s's creates: %v %v", a, b, q.Status.Used, err)
	}
	if list, err := cfree.CoreV1().ResourceQuotas("").List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("plane %s sees quotas: %v %v", free, list, err)
	}

	// A delete frees room: status.used follows and the next create fits.
	if err := ca.CoreV1().ConfigMaps("work").Delete(ctx, "cm-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ca, "work", "q", map[corev1.ResourceName]int64{"count/configmaps": 2, "configmaps": 2})
	// Admission reads quotas from the watch cache, as upstream's does from
	// its informer: it sees the freed usage a moment after a read of
	// status.used does.
	framework.Eventually(t, framework.DefaultTimeout, "create after a delete", func(ctx context.Context) error {
		if err := createConfigMap(ctx, ca, "work", "cm-3"); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	waitUsed(t, ca, "work", "q", map[corev1.ResourceName]int64{"count/configmaps": 3, "configmaps": 3})
	// Raising the limit is picked up: status.hard follows spec.hard.
	q, err := ca.CoreV1().ResourceQuotas("work").Get(ctx, "q", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Spec = configMapQuota(4).Spec
	if _, err := ca.CoreV1().ResourceQuotas("work").Update(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "status.hard raised to 4", func(ctx context.Context) error {
		q, err := ca.CoreV1().ResourceQuotas("work").Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := q.Status.Hard["count/configmaps"]; h.Value() != 4 {
			return fmt.Errorf("status.hard %v", q.Status.Hard)
		}
		return nil
	})
	// Admission reads the quota from the watch cache, which follows the
	// write above within moments.
	framework.Eventually(t, framework.DefaultTimeout, "create under the raised limit", func(ctx context.Context) error {
		err := createConfigMap(ctx, ca, "work", "cm-4")
		if err != nil && !apierrors.IsForbidden(err) {
			return framework.Stop(err)
		}
		return err
	})
}

// TestResourceQuotaCustomResource: count/<resource>.<group> limits a
// custom resource of the plane's CRD. (That usage follows a custom
// resource's deletion is not asserted: the controllers' cross-plane
// follower of a custom-resource storage built while objects are written
// can miss their events, an issue of that storage.)
func TestResourceQuotaCustomResource(t *testing.T) {
	t.Parallel()
	s := shared
	a := uniquePlane(t, "quota-cr")
	ctx := context.Background()
	ca := s.Client(t, a)
	framework.Eventually(t, framework.DefaultTimeout, "default ServiceAccount (the controllers run)", func(ctx context.Context) error {
		_, err := ca.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
	crdYAML, err := os.ReadFile("testdata/rayservices-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s.MustKubectl(t, a, string(crdYAML), "apply", "-f", "-")
	waitEstablished(t, s, a, "rayservices.ray.example.com")
	two := resource.MustParse("2")
	if _, err := ca.CoreV1().ResourceQuotas("default").Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "rays"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/rayservices.ray.example.com": two}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ca, "default", "rays", map[corev1.ResourceName]int64{"count/rayservices.ray.example.com": 0})
	dyn := s.Dynamic(t, a)
	for i := range 2 {
		if _, err := dyn.Resource(rayGVR).Namespace("default").Create(ctx, rayService(fmt.Sprintf("ray-%d", i), "https://example.com/dag"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = dyn.Resource(rayGVR).Namespace("default").Create(ctx, rayService("ray-2", "https://example.com/dag"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: rays, requested: count/rayservices.ray.example.com=1, used: count/rayservices.ray.example.com=2, limited: count/rayservices.ray.example.com=2") {
		t.Fatalf("3rd RayService: %v", err)
	}
	// Admission charged both creates.
	waitUsed(t, ca, "default", "rays", map[corev1.ResourceName]int64{"count/rayservices.ray.example.com": 2})
}

// TestLimitRangePerPlane: a LimitRange defaults the requests and limits of
// a Pod's containers and refuses one above its maximum, in its own plane
// only.
func TestLimitRangePerPlane(t *testing.T) {
	t.Parallel()
	s := shared
	a, b := uniquePlane(t, "limits-a"), uniquePlane(t, "limits-b")
	ctx := context.Background()
	ca, cb := s.Client(t, a), s.Client(t, b)
	lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "lr"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type:           corev1.LimitTypeContainer,
		Default:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Max:            corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
	}}}}
	if _, err := ca.CoreV1().LimitRanges("default").Create(ctx, lr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, limits corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Limits: limits}}}}}
	}
	got, err := ca.CoreV1().Pods("default").Create(ctx, pod("plain", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := got.Spec.Containers[0].Resources
	if res.Requests.Cpu().String() != "100m" || res.Requests.Memory().String() != "64Mi" ||
		res.Limits.Cpu().String() != "500m" || res.Limits.Memory().String() != "256Mi" {
		t.Fatalf("defaults not applied: %+v", res)
	}
	if !strings.Contains(got.Annotations["kubernetes.io/limit-ranger"], "cpu, memory request for container c") {
		t.Fatalf("limit-ranger annotation: %v", got.Annotations)
	}
	_, err = ca.CoreV1().Pods("default").Create(ctx, pod("big", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "maximum cpu usage per Container is 1, but limit is 2") {
		t.Fatalf("pod above max: %v", err)
	}

	// Plane B has no LimitRange: nothing defaulted, nothing refused.
	got, err = cb.CoreV1().Pods("default").Create(ctx, pod("plain", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Containers[0].Resources.Requests) != 0 || len(got.Spec.Containers[0].Resources.Limits) != 0 {
		t.Fatalf("plane %s's pod defaulted by plane %s's LimitRange: %+v", b, a, got.Spec.Containers[0].Resources)
	}
	if _, err := cb.CoreV1().Pods("default").Create(ctx, pod("big", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("plane %s limited by plane %s's LimitRange: %v", b, a, err)
	}
}

// TestQuotaBadInput: malformed quotas and limit ranges are refused with a
// Kubernetes Status naming the field.
func TestQuotaBadInput(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "quota-bad")
	base := "/clusters/" + plane + "/control-plane/api/v1/namespaces/default/"
	cases := []httpCase{
		{name: "quantity that does not parse", method: http.MethodPost, path: base + "resourcequotas", contentType: "application/json",
			body: []byte(`{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"x"},"spec":{"hard":{"pods":"lots"}}}`), wantCode: http.StatusBadRequest},
		{name: "negative hard limit", method: http.MethodPost, path: base + "resourcequotas", contentType: "application/json",
			body: []byte(`{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"x"},"spec":{"hard":{"count/configmaps":"-1"}}}`), wantCode: http.StatusUnprocessableEntity},
		{name: "default above max", method: http.MethodPost, path: base + "limitranges", contentType: "application/json",
			body:     []byte(`{"apiVersion":"v1","kind":"LimitRange","metadata":{"name":"x"},"spec":{"limits":[{"type":"Container","max":{"cpu":"1"},"default":{"cpu":"2"}}]}}`),
			wantCode: http.StatusUnprocessableEntity},
	}
	wantField := map[string]string{"negative hard limit": "spec.hard[count/configmaps]", "default above max": "spec.limits[0].default[cpu]"}
	for _, c := range cases {
		code, status, body := do(t, c)
		if code != c.wantCode || status == nil || status.Kind != "Status" {
			t.Fatalf("%s: got %d %s, want %d Status", c.name, code, truncate(body, 300), c.wantCode)
		}
		if f := wantField[c.name]; f != "" && !strings.Contains(body, f) {
			t.Fatalf("%s: Status does not name %s: %s", c.name, f, truncate(body, 300))
		}
	}
}
