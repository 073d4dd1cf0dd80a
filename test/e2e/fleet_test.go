package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"kplane.dev/kplane/test/e2e/framework"
)

var (
	fleetGVR = schema.GroupVersionResource{Group: "kplane.dev", Version: "v1", Resource: "fleets"}
	planeGVR = schema.GroupVersionResource{Group: "kplane.dev", Version: "v1", Resource: "planes"}
)

// fleetStatus is the part of a Fleet's status the tests read.
type fleetStatus struct {
	replicas, ready int64
	members         map[string]string // name -> phase
	condition       string            // Ready condition: status/reason
}

func readFleetStatus(u *unstructured.Unstructured) fleetStatus {
	st := fleetStatus{members: map[string]string{}}
	st.replicas, _, _ = unstructured.NestedInt64(u.Object, "status", "replicas")
	st.ready, _, _ = unstructured.NestedInt64(u.Object, "status", "readyReplicas")
	members, _, _ := unstructured.NestedSlice(u.Object, "status", "members")
	for _, m := range members {
		m := m.(map[string]any)
		st.members[m["name"].(string)], _ = m["phase"].(string)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if c := c.(map[string]any); c["type"] == "Ready" {
			st.condition = fmt.Sprintf("%v/%v", c["status"], c["reason"])
		}
	}
	return st
}

// waitFleet polls the Fleet until cond holds for its status.
func waitFleet(t *testing.T, fleets dynamic.ResourceInterface, name string, timeout time.Duration, what string, cond func(fleetStatus) bool) fleetStatus {
	t.Helper()
	var last fleetStatus
	framework.Eventually(t, max(timeout, framework.DefaultTimeout), "Fleet "+name+": "+what, func(ctx context.Context) error {
		u, err := fleets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		last = readFleetStatus(u)
		if !cond(last) {
			return fmt.Errorf("status replicas=%d ready=%d condition=%s", last.replicas, last.ready, last.condition)
		}
		return nil
	})
	return last
}

// waitGone polls until get answers 404.
func waitGone(t *testing.T, timeout time.Duration, what string, get func() error) {
	t.Helper()
	eventually(t, timeout, what+" gone", func() (bool, error) { return gone(get()) })
}

// memberPlanes lists the Planes labelled as members of fleet.
func memberPlanes(t *testing.T, s *framework.Server, fleet string) []string {
	t.Helper()
	list, err := s.Dynamic(t, "root").Resource(planeGVR).List(context.Background(),
		metav1.ListOptions{LabelSelector: "kplane.dev/fleet=" + fleet})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.GetName())
	}
	sort.Strings(names)
	return names
}

func memberNames(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%04d", prefix, i))
	}
	return out
}

// readyz asks a plane's own /readyz as the admin.
func readyz(t *testing.T, s *framework.Server, plane string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.PlaneURL(plane)+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+s.AdminToken())
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// TestFleet: kubectl apply of a Fleet of 50 brings 50 ready member planes;
// it scales to 80 and back to 20 (deletionPolicy Delete deletes the
// highest indexes with their data); deleting the Fleet deletes every
// member and its data before the Fleet goes.
func TestFleet(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	name := uniquePlane(t, "rl")
	prefix := name + "-"
	fleets := s.Dynamic(t, "root").Resource(fleetGVR)

	began := time.Now()
	s.MustKubectl(t, "root", fmt.Sprintf(`apiVersion: kplane.dev/v1
kind: Fleet
metadata:
  name: %s
spec:
  replicas: 50
  deletionPolicy: Delete
`, name), "apply", "-f", "-")
	s.MustKubectl(t, "root", "", "wait", "fleet/"+name, "--for=condition=Ready", "--timeout=60s")
	t.Logf("Fleet of 50 ready in %s", time.Since(began).Round(time.Millisecond))
	st := waitFleet(t, fleets, name, framework.DefaultTimeout, "50/50 ready", func(st fleetStatus) bool { return st.ready == 50 })
	if st.replicas != 50 || len(st.members) != 50 || st.condition != "True/AllMembersReady" {
		t.Fatalf("status: replicas %d, %d members, condition %s", st.replicas, len(st.members), st.condition)
	}
	want := memberNames(prefix, 0, 50)
	for _, m := range want {
		if st.members[m] != "Ready" {
			t.Fatalf("member %s is %q in status", m, st.members[m])
		}
	}
	if got := memberPlanes(t, s, name); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("labelled member planes %v, want %v", got, want)
	}
	// Ready means ready: every member answers its own readyz and serves
	// its bootstrapped API.
	for _, m := range []string{want[0], want[25], want[49]} {
		if code, body := readyz(t, s, m); code != http.StatusOK || body != "ok" {
			t.Fatalf("readyz of member %s: %d %q", m, code, body)
		}
		if _, err := s.Client(t, m).CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
			t.Fatalf("member %s: %v", m, err)
		}
	}
	out := s.MustKubectl(t, "root", "", "get", "fleets", name)
	if fields := strings.Fields(out); len(fields) < 8 || strings.Join(fields[:4], " ") != "NAME REPLICAS READY AGE" ||
		fields[4] != name || fields[5] != "50" || fields[6] != "50" {
		t.Errorf("kubectl get fleets:\n%s", out)
	}

	// Data in a member that scale-down removes, and in one it keeps.
	for _, m := range []string{prefix + "0019", prefix + "0020"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "episode"}, Data: map[string]string{"step": "1"}}
		if _, err := s.Client(t, m).CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	s.MustKubectl(t, "root", "", "patch", "fleet", name, "--type=merge", "-p", `{"spec":{"replicas":80}}`)
	waitFleet(t, fleets, name, 2*framework.DefaultTimeout, "80/80 ready", func(st fleetStatus) bool { return st.replicas == 80 && st.ready == 80 })
	if got := memberPlanes(t, s, name); len(got) != 80 || got[79] != prefix+"0079" {
		t.Fatalf("after scale-up, members %d (last %v)", len(got), got[len(got)-1])
	}

	s.MustKubectl(t, "root", "", "patch", "fleet", name, "--type=merge", "-p", `{"spec":{"replicas":20}}`)
	waitFleet(t, fleets, name, 2*framework.DefaultTimeout, "20/20 ready", func(st fleetStatus) bool { return st.replicas == 20 && st.ready == 20 })
	planes := s.Dynamic(t, "root").Resource(planeGVR)
	for _, m := range memberNames(prefix, 20, 80) {
		waitGone(t, 2*framework.DefaultTimeout, "plane "+m, func() error { _, err := planes.Get(ctx, m, metav1.GetOptions{}); return err })
	}
	if got, want := memberPlanes(t, s, name), memberNames(prefix, 0, 20); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after scale-down, members %v, want %v", got, want)
	}
	if keys := planeKeys(t, s, prefix+"0020"); len(keys) != 0 {
		t.Fatalf("scaled-down member kept %d keys, e.g. %v", len(keys), keys[:min(3, len(keys))])
	}
	if _, err := s.Client(t, prefix+"0019").CoreV1().ConfigMaps("default").Get(ctx, "episode", metav1.GetOptions{}); err != nil {
		t.Fatalf("a kept member lost its data: %v", err)
	}

	if err := fleets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, 3*framework.DefaultTimeout, "Fleet "+name, func() error { _, err := fleets.Get(ctx, name, metav1.GetOptions{}); return err })
	// The finalizer released the Fleet only once every member was gone.
	for _, m := range memberNames(prefix, 0, 20) {
		if _, err := planes.Get(ctx, m, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("member %s outlived its deleted Fleet: %v", m, err)
		}
	}
	if keys := planeKeys(t, s, prefix+"0019"); len(keys) != 0 {
		t.Fatalf("a deleted member kept %d keys, e.g. %v", len(keys), keys[:min(3, len(keys))])
	}
}

// TestFleetRetainAndAdopt: a Fleet of spec.names adopts an existing plane
// with its data; under Retain a name removed from the spec and the
// deletion of the Fleet release the planes (label gone, data kept); a
// plane another Fleet owns is reported Failed, not taken.
func TestFleetRetainAndAdopt(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	fleets := s.Dynamic(t, "root").Resource(fleetGVR)
	planes := s.Dynamic(t, "root").Resource(planeGVR)
	name, other := uniquePlane(t, "keep"), uniquePlane(t, "keep-other")
	existing, fresh := uniquePlane(t, "adopted"), uniquePlane(t, "fresh")

	// A plane that exists before the Fleet, with data in it.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "state"}, Data: map[string]string{"k": "v"}}
	if _, err := s.Client(t, existing).CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fleet := func(name string, names ...string) *unstructured.Unstructured {
		list := make([]any, len(names))
		for i, n := range names {
			list[i] = n
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kplane.dev/v1", "kind": "Fleet", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"names": list},
		}}
	}
	if _, err := fleets.Create(ctx, fleet(name, existing, fresh), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, fleets, name, framework.DefaultTimeout, "2/2 ready", func(st fleetStatus) bool { return st.ready == 2 })
	if got := memberPlanes(t, s, name); strings.Join(got, ",") != strings.Join(sortedCopy(existing, fresh), ",") {
		t.Fatalf("members %v", got)
	}
	u, err := fleets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if policy, _, _ := unstructured.NestedString(u.Object, "spec", "deletionPolicy"); policy != "Retain" {
		t.Fatalf("deletionPolicy defaults to %q, want Retain", policy)
	}

	// Another Fleet naming a member of the first does not take it.
	if _, err := fleets.Create(ctx, fleet(other, existing), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st := waitFleet(t, fleets, other, framework.DefaultTimeout, "member Failed", func(st fleetStatus) bool { return st.members[existing] == "Failed" })
	if st.condition != "False/MembersFailed" {
		t.Fatalf("contested Fleet condition %s", st.condition)
	}
	if p, err := planes.Get(ctx, existing, metav1.GetOptions{}); err != nil || p.GetLabels()["kplane.dev/fleet"] != name {
		t.Fatalf("contested plane's owner: %v %v", p.GetLabels(), err)
	}

	// Removing a name releases that plane under Retain.
	patch := fmt.Sprintf(`{"spec":{"names":[%q]}}`, existing)
	if _, err := fleets.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, fleets, name, framework.DefaultTimeout, "1/1 ready", func(st fleetStatus) bool { return st.replicas == 1 && st.ready == 1 })
	framework.Eventually(t, framework.DefaultTimeout, "one member of "+name+" left", func(context.Context) error {
		if members := memberPlanes(t, s, name); len(members) != 1 {
			return fmt.Errorf("members %v", members)
		}
		return nil
	})
	if p, err := planes.Get(ctx, fresh, metav1.GetOptions{}); err != nil || p.GetLabels()["kplane.dev/fleet"] != "" {
		t.Fatalf("released plane %s: labels %v, %v", fresh, p.GetLabels(), err)
	}

	// Deleting the Fleet releases its members; their data stays. The
	// other Fleet then adopts the plane it asked for.
	if err := fleets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, framework.DefaultTimeout, "Fleet "+name, func() error { _, err := fleets.Get(ctx, name, metav1.GetOptions{}); return err })
	if got, err := s.Client(t, existing).CoreV1().ConfigMaps("default").Get(ctx, "state", metav1.GetOptions{}); err != nil || got.Data["k"] != "v" {
		t.Fatalf("retained plane lost its data: %v", err)
	}
	waitFleet(t, fleets, other, framework.DefaultTimeout, "adoption after release", func(st fleetStatus) bool { return st.ready == 1 })
	if got := memberPlanes(t, s, other); len(got) != 1 || got[0] != existing {
		t.Fatalf("members of %s: %v", other, got)
	}
	if err := fleets.Delete(ctx, other, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, framework.DefaultTimeout, "Fleet "+other, func() error { _, err := fleets.Get(ctx, other, metav1.GetOptions{}); return err })
	for _, p := range []string{existing, fresh} {
		if _, err := planes.Get(ctx, p, metav1.GetOptions{}); err != nil {
			t.Fatalf("retained plane %s: %v", p, err)
		}
	}
}

func sortedCopy(names ...string) []string {
	out := append([]string(nil), names...)
	sort.Strings(out)
	return out
}

// TestFleetTTL: a Fleet with ttlSecondsAfterReady deletes itself that long
// after it became ready, and (deletionPolicy Delete) its members with it.
func TestFleetTTL(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	fleets := s.Dynamic(t, "root").Resource(fleetGVR)
	planes := s.Dynamic(t, "root").Resource(planeGVR)
	name := uniquePlane(t, "ttl")
	f := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kplane.dev/v1", "kind": "Fleet", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"replicas": int64(3), "namePrefix": name + "-ep-", "deletionPolicy": "Delete", "ttlSecondsAfterReady": int64(2)},
	}}
	if _, err := fleets.Create(ctx, f, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, fleets, name, framework.DefaultTimeout, "3/3 ready", func(st fleetStatus) bool { return st.ready == 3 })
	u, err := fleets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	firstReady, _, _ := unstructured.NestedString(u.Object, "status", "firstReadyTime")
	readyAt, err := time.Parse(time.RFC3339, firstReady)
	if err != nil {
		t.Fatalf("status.firstReadyTime %q: %v", firstReady, err)
	}
	waitGone(t, framework.DefaultTimeout, "Fleet "+name, func() error { _, err := fleets.Get(ctx, name, metav1.GetOptions{}); return err })
	// firstReadyTime has second precision.
	if lived := time.Since(readyAt); lived < time.Second {
		t.Fatalf("the Fleet was deleted %s after it became ready, before its TTL of 2s", lived)
	}
	for _, m := range memberNames(name+"-ep-", 0, 3) {
		if _, err := planes.Get(ctx, m, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("member %s of the expired Fleet: %v", m, err)
		}
	}
}

// TestFleetValidation: invalid Fleets are refused at admission with a 422
// that says what is wrong.
func TestFleetValidation(t *testing.T) {
	t.Parallel()
	s := shared
	fleets := s.Dynamic(t, "root").Resource(fleetGVR)
	cases := []struct {
		name string
		spec map[string]any
		want []string
	}{
		{"negative", map[string]any{"replicas": int64(-1)}, []string{"spec.replicas", "greater than or equal to 0"}},
		{"too-many", map[string]any{"replicas": int64(10001)}, []string{"spec.replicas", "less than or equal to 10000"}},
		{"both", map[string]any{"replicas": int64(2), "names": []any{"a"}}, []string{"set exactly one of spec.replicas"}},
		{"neither", map[string]any{}, []string{"set exactly one of spec.replicas"}},
		{"bad-name", map[string]any{"names": []any{"ok", "Not_A_Plane"}}, []string{"spec.names[1]", `"Not_A_Plane" is not a plane id`}},
		{"root-member", map[string]any{"names": []any{"root"}}, []string{"spec.names[0]", "root plane cannot be a Fleet member"}},
		{"duplicate-name", map[string]any{"names": []any{"a", "a"}}, []string{"spec.names[1]", "Duplicate value"}},
		{"bad-prefix", map[string]any{"replicas": int64(1), "namePrefix": "RL_"}, []string{"spec.namePrefix", "lower-case letters"}},
		{"prefix-with-names", map[string]any{"names": []any{"a"}, "namePrefix": "x-"}, []string{"spec.namePrefix names the members of spec.replicas"}},
		{"bad-policy", map[string]any{"replicas": int64(1), "deletionPolicy": "Keep"}, []string{"spec.deletionPolicy", `supported values: "Retain", "Delete"`}},
		{"negative-ttl", map[string]any{"replicas": int64(1), "ttlSecondsAfterReady": int64(-5)}, []string{"spec.ttlSecondsAfterReady", "greater than or equal to 0"}},
	}
	for _, c := range cases {
		f := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kplane.dev/v1", "kind": "Fleet", "metadata": map[string]any{"name": "invalid-" + c.name},
			"spec": c.spec,
		}}
		_, err := fleets.Create(context.Background(), f, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: want 422 Invalid, got %v", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}
	// A Fleet name that cannot prefix plane ids needs spec.namePrefix.
	long := strings.Repeat("a", 59)
	out, err := s.Kubectl(t, "root", fmt.Sprintf("apiVersion: kplane.dev/v1\nkind: Fleet\nmetadata:\n  name: %s\nspec:\n  replicas: 1\n", long), "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "set spec.namePrefix") {
		t.Errorf("a 59-character Fleet name without namePrefix: %v\n%s", err, out)
	}
}

// TestFleetRestart: a server killed while a Fleet is being provisioned
// converges after the restart: every member is created and Ready once.
func TestFleetRestart(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	ctx := context.Background()
	fleets := s.Dynamic(t, "root").Resource(fleetGVR)
	f := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kplane.dev/v1", "kind": "Fleet", "metadata": map[string]any{"name": "crash"},
		"spec": map[string]any{"replicas": int64(40), "deletionPolicy": "Delete"},
	}}
	if _, err := fleets.Create(ctx, f, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Kill as soon as some members exist, before all are ready.
	framework.Eventually(t, framework.DefaultTimeout, "a first member of crash", func(context.Context) error {
		if len(memberPlanes(t, s, "crash")) == 0 {
			return fmt.Errorf("no member yet")
		}
		return nil
	})
	u, err := fleets.Get(ctx, "crash", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := readFleetStatus(u)
	s.Kill()
	t.Logf("killed with %d/40 members ready", before.ready)
	if before.ready == 40 {
		t.Log("every member was ready before the kill; the restart still has to keep them")
	}
	s.Restart(t)
	if err := s.WaitReady(time.Minute); err != nil {
		t.Fatal(err)
	}
	fleets = s.Dynamic(t, "root").Resource(fleetGVR)
	waitFleet(t, fleets, "crash", 2*framework.DefaultTimeout, "40/40 ready after restart", func(st fleetStatus) bool { return st.ready == 40 })
	if got, want := memberPlanes(t, s, "crash"), memberNames("crash-", 0, 40); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("members after restart %v", got)
	}
	// Every member was bootstrapped: its system namespaces exist.
	for _, m := range []string{"crash-0000", "crash-0039"} {
		nss, err := s.Client(t, m).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil || len(nss.Items) != 4 {
			t.Fatalf("member %s after restart: %d namespaces (%v)", m, len(nss.Items), err)
		}
	}
}
