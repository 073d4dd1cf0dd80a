package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/test/e2e/framework"
)

// createLimitedPlane creates a Plane with spec.limits in root and waits
// until the plane answers ready.
func createLimitedPlane(t *testing.T, s *framework.Server, name string, limits map[string]any) {
	t.Helper()
	p := newPlane(name, map[string]any{"limits": limits})
	if _, err := s.Dynamic(t, "root").Resource(planesGVR).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating plane %s with limits %v: %v", name, limits, err)
	}
	c := s.Client(t, name)
	framework.Eventually(t, framework.DefaultTimeout, "plane "+name+" ready", func(ctx context.Context) error {
		_, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// setLimits replaces a Plane's spec.limits (nil: none).
func setLimits(t *testing.T, s *framework.Server, name string, limits map[string]any) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"limits": nil}})
	if err != nil {
		t.Fatal(err)
	}
	planes := s.Dynamic(t, "root").Resource(planesGVR)
	if _, err := planes.Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if limits == nil {
		return
	}
	patch, err = json.Marshal(map[string]any{"spec": map[string]any{"limits": limits}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := planes.Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// usageTimeout bounds the wait for a plane's usage in its status, which is
// written once the usage holds still for one 10 s pass: up to two passes
// after the change, more on a loaded machine.
var usageTimeout = 2 * framework.DefaultTimeout

// planeUsage reads status.usage of a Plane.
func planeUsage(ctx context.Context, s *framework.Server, t *testing.T, name string) (map[string]int64, error) {
	p, err := s.Dynamic(t, "root").Resource(planesGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, k := range []string{"objects", "bytes", "watches"} {
		v, _, _ := unstructured.NestedInt64(p.Object, "status", "usage", k)
		out[k] = v
	}
	return out, nil
}

func configMap(name string, dataBytes int) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if dataBytes > 0 {
		cm.Data = map[string]string{"d": strings.Repeat("x", dataBytes)}
	}
	return cm
}

// requireExceeded fails unless err is the limits' 403 naming limit.
func requireExceeded(t *testing.T, err error, limit string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("want 403 exceeded quota (%s), got %v", limit, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "exceeded quota") || !strings.Contains(msg, limit) || !strings.Contains(msg, "used:") {
		t.Fatalf("403 does not name the limit %s and the usage: %s", limit, msg)
	}
}

// TestPlaneLimitObjects: spec.limits.maxObjects refuses the create past it
// with 403 naming the limit and the usage, the Plane's status reports the
// usage, another plane is not limited, and raising or lowering the limit
// holds from the next write.
func TestPlaneLimitObjects(t *testing.T) {
	t.Parallel()
	s := shared
	a, b := uniquePlane(t, "limit-objects-a"), uniquePlane(t, "limit-objects-b")
	createLimitedPlane(t, s, a, map[string]any{"maxObjects": 5})
	createPlane(t, s, b, "")
	ctx := context.Background()
	ca, cb := s.Client(t, a), s.Client(t, b)
	for i := range 5 {
		if _, err := ca.CoreV1().ConfigMaps("default").Create(ctx, configMap(fmt.Sprint("cm-", i), 0), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %d of 5: %v", i, err)
		}
	}
	_, err := ca.CoreV1().ConfigMaps("default").Create(ctx, configMap("cm-5", 0), metav1.CreateOptions{})
	requireExceeded(t, err, "maxObjects=5")
	if !strings.Contains(err.Error(), "used: objects=5") {
		t.Fatalf("usage not in the refusal: %v", err)
	}
	// A plane's first change of an object it inherits from the base
	// plane stores a record of its own: a create to its limit.
	label := []byte(`{"metadata":{"labels":{"changed":"yes"}}}`)
	_, err = ca.CoreV1().Namespaces().Patch(ctx, "default", types.MergePatchType, label, metav1.PatchOptions{})
	requireExceeded(t, err, "maxObjects=5")
	for i := range 10 {
		if _, err := cb.CoreV1().ConfigMaps("default").Create(ctx, configMap(fmt.Sprint("cm-", i), 0), metav1.CreateOptions{}); err != nil {
			t.Fatalf("unlimited plane %s refused: %v", b, err)
		}
	}
	framework.Eventually(t, usageTimeout, "usage of "+a+" in its status", func(ctx context.Context) error {
		u, err := planeUsage(ctx, s, t, a)
		if err == nil && (u["objects"] != 5 || u["bytes"] <= 0) {
			err = fmt.Errorf("usage %v", u)
		}
		return err
	})

	setLimits(t, s, a, map[string]any{"maxObjects": 7})
	framework.Eventually(t, framework.DefaultTimeout, "the raised limit", func(ctx context.Context) error {
		_, err := ca.CoreV1().ConfigMaps("default").Create(ctx, configMap("cm-5", 0), metav1.CreateOptions{})
		return err
	})
	if _, err := ca.CoreV1().ConfigMaps("default").Create(ctx, configMap("cm-6", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = ca.CoreV1().ConfigMaps("default").Create(ctx, configMap("cm-7", 0), metav1.CreateOptions{})
	requireExceeded(t, err, "maxObjects=7")

	// Lowered under the usage: no create, but deletes and updates that do
	// not grow the plane still pass.
	setLimits(t, s, a, map[string]any{"maxObjects": 2})
	framework.Eventually(t, framework.DefaultTimeout, "the lowered limit", func(ctx context.Context) error {
		_, err := ca.CoreV1().ConfigMaps("default").Create(ctx, configMap("cm-8", 0), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "maxObjects=2") {
			return fmt.Errorf("not refused with maxObjects=2: %v", err)
		}
		return nil
	})
	if err := ca.CoreV1().ConfigMaps("default").Delete(ctx, "cm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	setLimits(t, s, a, nil)
	framework.Eventually(t, framework.DefaultTimeout, "no limit", func(ctx context.Context) error {
		_, err := ca.CoreV1().ConfigMaps("default").Create(ctx, configMap("cm-9", 0), metav1.CreateOptions{})
		return err
	})
}

// TestPlaneLimitNamespaceDeletion: the objects of a deleted namespace
// (removed by the namespace controller, one delete each) leave the plane's
// count, so a plane that filled its limit in a namespace gets its room
// back once the namespace is gone.
func TestPlaneLimitNamespaceDeletion(t *testing.T) {
	t.Parallel()
	s := shared
	a := uniquePlane(t, "limit-ns")
	const limit = 40
	createLimitedPlane(t, s, a, map[string]any{"maxObjects": limit})
	ctx := context.Background()
	ca := s.Client(t, a)
	if _, err := ca.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bulk"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := 0; i <= limit && err == nil; i++ {
		_, err = ca.CoreV1().ConfigMaps("bulk").Create(ctx, configMap(fmt.Sprint("cm-", i), 100), metav1.CreateOptions{})
	}
	requireExceeded(t, err, fmt.Sprintf("maxObjects=%d", limit))
	if err := ca.CoreV1().Namespaces().Delete(ctx, "bulk", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "namespace bulk gone", func(ctx context.Context) error {
		_, err := ca.CoreV1().Namespaces().Get(ctx, "bulk", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	// The plane held nothing of its own but the namespace and its
	// objects: most of the limit is free again, once the counters have
	// followed the deletions.
	created := 0
	framework.Eventually(t, framework.DefaultTimeout, "room after the namespace's deletion", func(context.Context) error {
		// Not the poll's context: a request cut by its deadline would hide
		// the last refusal and usage seen.
		ctx := context.Background()
		for ; created < limit-10; created++ {
			if _, err := ca.CoreV1().ConfigMaps("default").Create(ctx, configMap(fmt.Sprint("after-", created), 0), metav1.CreateOptions{}); err != nil {
				u, uerr := planeUsage(ctx, s, t, a)
				return fmt.Errorf("create %d after the namespace's deletion (status usage %v %v): %w", created, u, uerr, err)
			}
		}
		return nil
	})
	framework.Eventually(t, usageTimeout, "usage after the namespace's deletion", func(ctx context.Context) error {
		u, err := planeUsage(ctx, s, t, a)
		if err == nil && (u["objects"] < limit-10 || u["objects"] > limit) {
			err = fmt.Errorf("usage %v", u)
		}
		return err
	})
}

// TestPlaneLimitBytes: spec.limits.maxBytes refuses a create and an update
// that would take the plane's stored bytes past it; an update that
// shrinks passes.
func TestPlaneLimitBytes(t *testing.T) {
	t.Parallel()
	s := shared
	a := uniquePlane(t, "limit-bytes")
	createLimitedPlane(t, s, a, map[string]any{"maxBytes": 5000})
	ctx := context.Background()
	ca := s.Client(t, a)
	created := 0
	var err error
	for ; created < 10; created++ {
		if _, err = ca.CoreV1().ConfigMaps("default").Create(ctx, configMap(fmt.Sprint("big-", created), 1000), metav1.CreateOptions{}); err != nil {
			break
		}
	}
	requireExceeded(t, err, "maxBytes=5000")
	if created < 3 || created > 4 {
		t.Fatalf("%d ConfigMaps of 1,000 bytes of data fit in 5,000 bytes", created)
	}
	framework.Eventually(t, framework.DefaultTimeout, "bytes in the status", func(context.Context) error {
		// Not the poll's context: a Get cut by its deadline would hide
		// the last usage seen.
		u, err := planeUsage(context.Background(), s, t, a)
		if err == nil && (u["bytes"] < int64(created)*1000 || u["bytes"] > 5000 || u["objects"] != int64(created)) {
			err = fmt.Errorf("usage %v after %d ConfigMaps", u, created)
		}
		return err
	})
	cm, err := ca.CoreV1().ConfigMaps("default").Get(ctx, "big-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["d"] = strings.Repeat("y", 4000)
	_, err = ca.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
	requireExceeded(t, err, "maxBytes=5000")
	cm.Data["d"] = "small"
	if _, err := ca.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("an update that shrinks the plane: %v", err)
	}
}

// planeGet GETs path of plane with the admin token and returns the status
// code and the Retry-After header.
func planeGet(s *framework.Server, client *http.Client, plane, path string) (int, string, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, s.PlaneURL(plane)+path, nil)
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.AdminToken())
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), body, err
}

// TestPlaneLimitRequestRate: past requestsPerSecond and requestBurst a
// plane's requests answer 429 with Retry-After and a Status; another
// plane's are not refused.
func TestPlaneLimitRequestRate(t *testing.T) {
	t.Parallel()
	s := shared
	a, b := uniquePlane(t, "limit-rate-a"), uniquePlane(t, "limit-rate-b")
	createLimitedPlane(t, s, a, map[string]any{"requestsPerSecond": 1, "requestBurst": 3})
	createPlane(t, s, b, "")
	client := s.HTTPClient()
	limited := 0
	for range 10 {
		code, retryAfter, body, err := planeGet(s, client, a, "/api/v1/namespaces/default/configmaps")
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusTooManyRequests {
			continue
		}
		limited++
		if n, err := strconv.Atoi(retryAfter); err != nil || n < 1 {
			t.Fatalf("429 without a Retry-After of at least a second: %q", retryAfter)
		}
		var status metav1.Status
		if err := json.Unmarshal(body, &status); err != nil || status.Reason != metav1.StatusReasonTooManyRequests ||
			!strings.Contains(status.Message, "requestsPerSecond=1") {
			t.Fatalf("429 is not a TooManyRequests Status naming the limit: %s (%v)", body, err)
		}
	}
	// A burst of 3 and one more per second: 10 requests in well under
	// 6 seconds are refused at least 1 time, more in practice.
	if limited == 0 {
		t.Fatalf("none of 10 requests at once refused by requestsPerSecond 1, burst 3")
	}
	for range 20 {
		code, _, body, err := planeGet(s, client, b, "/api/v1/namespaces/default/configmaps")
		if err != nil || code != http.StatusOK {
			t.Fatalf("unlimited plane %s: %d %s %v", b, code, body, err)
		}
	}
	setLimits(t, s, a, map[string]any{"requestsPerSecond": 1000})
	framework.Eventually(t, framework.DefaultTimeout, "the raised rate", func(context.Context) error {
		for range 20 {
			code, _, _, err := planeGet(s, client, a, "/api/v1/namespaces/default/configmaps")
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return fmt.Errorf("answered %d", code)
			}
		}
		return nil
	})
}

// TestPlaneLimitWatches: past maxWatches a watch answers 403 naming the
// limit; a watch ended frees its place; the status reports open watches.
func TestPlaneLimitWatches(t *testing.T) {
	t.Parallel()
	s := shared
	a := uniquePlane(t, "limit-watches")
	createLimitedPlane(t, s, a, map[string]any{"maxWatches": 2})
	ctx := context.Background()
	ca := s.Client(t, a)
	var open []watch.Interface
	defer func() {
		for _, w := range open {
			w.Stop()
		}
	}()
	for range 2 {
		w, err := ca.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, w)
	}
	_, err := ca.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	requireExceeded(t, err, "maxWatches=2")
	framework.Eventually(t, framework.DefaultTimeout, "watches in the status", func(ctx context.Context) error {
		u, err := planeUsage(ctx, s, t, a)
		if err == nil && u["watches"] != 2 {
			err = fmt.Errorf("usage %v", u)
		}
		return err
	})
	open[0].Stop()
	open = open[1:]
	framework.Eventually(t, framework.DefaultTimeout, "a watch after one ended", func(ctx context.Context) error {
		w, err := ca.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
		if err == nil {
			open = append(open, w)
		}
		return err
	})
}

// TestPlaneLimitsInvalid: bad limits are refused at admission with 422
// naming the field.
func TestPlaneLimitsInvalid(t *testing.T) {
	t.Parallel()
	s := shared
	planes := s.Dynamic(t, "root").Resource(planesGVR)
	for _, tc := range []struct {
		limits map[string]any
		field  string
	}{
		{map[string]any{"maxObjects": -1}, "spec.limits.maxObjects"},
		{map[string]any{"maxBytes": "lots"}, "spec.limits.maxBytes"},
		{map[string]any{"maxWatches": 2000000}, "spec.limits.maxWatches"},
		{map[string]any{"requestBurst": 5}, "spec.limits.requestBurst"},
	} {
		name := uniquePlane(t, "limit-invalid")
		_, err := planes.Create(context.Background(), newPlane(name, map[string]any{"limits": tc.limits}), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("limits %v: want 422, got %v", tc.limits, err)
		}
		var status apierrors.APIStatus
		if !errors.As(err, &status) || status.Status().Details == nil {
			t.Fatalf("limits %v: no details in %v", tc.limits, err)
		}
		found := false
		for _, c := range status.Status().Details.Causes {
			found = found || c.Field == tc.field
		}
		if !found {
			t.Fatalf("limits %v: 422 does not name %s: %+v", tc.limits, tc.field, status.Status().Details.Causes)
		}
	}
}

// TestPlaneLimitDefaultsAndPlanesPerUser: the server's flags limit every
// plane but root; a first request past --max-planes-per-user answers 403
// and a deleted plane frees its place; counts are right after a restart.
func TestPlaneLimitDefaultsAndPlanesPerUser(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{Args: []string{
		"--max-planes-per-user=2", "--plane-max-objects=3", "--simulation=false", "--disable-controllers",
	}})
	ctx := context.Background()
	for _, p := range []string{"mine-1", "mine-2"} {
		if _, err := s.Client(t, p).CoreV1().ConfigMaps("default").Create(ctx, configMap("first", 0), metav1.CreateOptions{}); err != nil {
			t.Fatalf("first request to %s: %v", p, err)
		}
	}
	_, err := s.Client(t, "mine-3").CoreV1().ConfigMaps("default").Create(ctx, configMap("first", 0), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "--max-planes-per-user") {
		t.Fatalf("third plane by first request: want 403 naming --max-planes-per-user, got %v", err)
	}
	// A Plane created explicitly is not a first request's.
	createPlane(t, s, "explicit", "")

	c := s.Client(t, "mine-1")
	for _, name := range []string{"second", "third"} {
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, configMap(name, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.CoreV1().ConfigMaps("default").Create(ctx, configMap("fourth", 0), metav1.CreateOptions{})
	requireExceeded(t, err, "maxObjects=3")
	root := s.Client(t, "root")
	for i := range 5 {
		if _, err := root.CoreV1().ConfigMaps("default").Create(ctx, configMap(fmt.Sprint("root-", i), 0), metav1.CreateOptions{}); err != nil {
			t.Fatalf("root is not limited by the defaults: %v", err)
		}
	}

	s.Restart(t)
	c = s.Client(t, "mine-1")
	framework.Eventually(t, framework.DefaultTimeout, "the count after a restart", func(ctx context.Context) error {
		_, err := c.CoreV1().ConfigMaps("default").Create(ctx, configMap("fourth", 0), metav1.CreateOptions{})
		if err == nil {
			return framework.Stop(errors.New("a fourth object stored after the restart: the count was lost"))
		}
		if !strings.Contains(err.Error(), "used: objects=3") {
			return err
		}
		return nil
	})

	if err := s.Dynamic(t, "root").Resource(planesGVR).Delete(ctx, "mine-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var c3 kubernetes.Interface = s.Client(t, "mine-3")
	framework.Eventually(t, framework.DefaultTimeout, "a first request once a plane is deleted", func(ctx context.Context) error {
		_, err := c3.CoreV1().ConfigMaps("default").Create(ctx, configMap("first", 0), metav1.CreateOptions{})
		return err
	})
}

// TestPlaneLimitClone: a clone starts with its source's records, so a
// clone whose limits its source already passes is refused at its
// creation (403 naming the limit and the source's usage) rather than born
// over them; one within its limits is made and holds the records.
func TestPlaneLimitClone(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	src := uniquePlane(t, "limit-clone-src")
	createPlane(t, s, src, "")
	cs := s.Client(t, src)
	for i := range 8 {
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, configMap(fmt.Sprint("cm-", i), 100), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, framework.DefaultTimeout, "the source's usage counted", func(ctx context.Context) error {
		u, err := planeUsage(ctx, s, t, src)
		if err == nil && u["objects"] < 8 {
			err = fmt.Errorf("usage %v", u)
		}
		return err
	})
	planesClient := s.Dynamic(t, "root").Resource(planesGVR)
	clone := func(name string, limits map[string]any) error {
		_, err := planesClient.Create(ctx, newPlane(name, map[string]any{"from": src, "limits": limits}), metav1.CreateOptions{})
		return err
	}
	for limit, limits := range map[string]map[string]any{
		"maxObjects=3": {"maxObjects": 3},
		"maxBytes=200": {"maxBytes": 200},
	} {
		name := uniquePlane(t, "limit-clone-over")
		err := clone(name, limits)
		requireExceeded(t, err, limit)
		if !strings.Contains(err.Error(), "cloned from "+src) {
			t.Fatalf("the refusal does not name the source: %v", err)
		}
		if _, err := planesClient.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("refused clone %s: Plane exists (%v)", name, err)
		}
	}
	within := uniquePlane(t, "limit-clone-within")
	if err := clone(within, map[string]any{"maxObjects": 100}); err != nil {
		t.Fatalf("a clone within its limits: %v", err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "the clone's records", func(ctx context.Context) error {
		list, err := s.Client(t, within).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) < 8 {
			err = fmt.Errorf("%d ConfigMaps", len(list.Items))
		}
		return err
	})
}
