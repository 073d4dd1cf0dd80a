package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"kplane.dev/kplane/test/e2e/framework"
)

// membersHold waits until every member's Plane holds want as its
// spec.<field> ("": none; JSON with its keys in order) and, with want, the
// Fleet's mark of it.
func membersHold(t *testing.T, s *framework.Server, members []string, field, want string) {
	t.Helper()
	planes := s.Dynamic(t, "root").Resource(planeGVR)
	for _, m := range members {
		framework.Eventually(t, framework.DefaultTimeout, "member "+m+" spec."+field+" "+want, func(ctx context.Context) error {
			p, err := planes.Get(ctx, m, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got := ""
			if value, found, _ := unstructured.NestedFieldNoCopy(p.Object, "spec", field); found {
				data, err := json.Marshal(value)
				if err != nil {
					return err
				}
				got = string(data)
			}
			_, marked := p.GetAnnotations()["kplane.dev/fleet-"+field]
			if got != want || marked != (want != "") {
				return fmt.Errorf("spec.%s %s, marked %t", field, got, marked)
			}
			return nil
		})
	}
}

// TestFleetMemberSettings: a Fleet's spec.simulation is every member's
// from its creation (a member's first Pod lands on the Fleet's node
// shape); limits set later reach every member (its third object is
// refused); a change reaches every member, new ones included, replacing
// what each held; a member's own change stays until the Fleet's next one;
// removing one takes it from the members; a bad one is refused as a
// Plane's is.
func TestFleetMemberSettings(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	name := uniquePlane(t, "fsim")
	fleets := s.Dynamic(t, "root").Resource(fleetGVR)
	planes := s.Dynamic(t, "root").Resource(planeGVR)
	t.Cleanup(func() { _ = fleets.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	s.MustKubectl(t, "root", fmt.Sprintf(`apiVersion: kplane.dev/v1
kind: Fleet
metadata:
  name: %s
spec:
  replicas: 2
  deletionPolicy: Delete
  simulation:
    nodes: {count: 1}
    runDuration: 1h
`, name), "apply", "-f", "-")
	waitFleet(t, fleets, name, framework.DefaultTimeout, "2/2 ready", func(st fleetStatus) bool { return st.ready == 2 })
	members := memberNames(name+"-", 0, 2)
	// Durations as Go writes them: the Fleet's are read as durations.
	membersHold(t, s, members, "simulation", `{"nodes":{"count":1},"runDuration":"1h0m0s"}`)

	// The member's simulated cluster is the Fleet's: one node.
	s.MustKubectl(t, members[0], "", "create", "job", "long", "--image=trainer:1")
	c := s.Client(t, members[0])
	framework.Eventually(t, framework.DefaultTimeout, "job long's pod running", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "job-name=long", 1, "trainer:1")
		return err
	})
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("member %s: nodes %v, %v; the Fleet asked for 1", members[0], nodes, err)
	}

	// One episode's own fault stays while the Fleet's simulation does not
	// change, also when the Fleet's limits do (below).
	if _, err := planes.Patch(ctx, members[1], types.MergePatchType, []byte(`{"spec":{"simulation":{"readyDelay":"5s"}}}`),
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// Limits set later reach the members: the third object is refused.
	s.MustKubectl(t, "root", "", "patch", "fleet", name, "--type=merge", "-p", `{"spec":{"limits":{"maxObjects":2}}}`)
	membersHold(t, s, members, "limits", `{"maxObjects":2}`)
	member1 := s.Client(t, members[1]).CoreV1().ConfigMaps("default")
	for _, cm := range []string{"a", "b", "c"} {
		_, err := member1.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm}}, metav1.CreateOptions{})
		if cm != "c" && err != nil {
			t.Fatalf("configmap %s in member %s: %v", cm, members[1], err)
		}
		if cm == "c" && !apierrors.IsForbidden(err) {
			t.Fatalf("a third object in member %s, whose Fleet allows 2: want 403, got %v", members[1], err)
		}
	}

	p, err := planes.Get(ctx, members[1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sim, _, _ := unstructured.NestedMap(p.Object, "spec", "simulation"); sim["readyDelay"] != "5s" {
		t.Fatalf("member %s's own simulation after the Fleet's limits changed: %v", members[1], sim)
	}

	s.MustKubectl(t, "root", "", "patch", "fleet", name, "--type=merge", "-p",
		`{"spec":{"replicas":3,"simulation":{"nodes":null,"runDuration":"100ms"},"limits":null}}`)
	waitFleet(t, fleets, name, framework.DefaultTimeout, "3/3 ready", func(st fleetStatus) bool { return st.ready == 3 })
	members = memberNames(name+"-", 0, 3)
	membersHold(t, s, members, "simulation", `{"runDuration":"100ms"}`)
	membersHold(t, s, members, "limits", "")
	if _, err := member1.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a third object once the Fleet sets no limits: %v", err)
	}
	if out, err := s.Kubectl(t, members[0], "", "wait", "--for=condition=Complete", "job/long",
		"--timeout="+framework.DefaultTimeout.String()); err != nil {
		t.Fatalf("job long after the Fleet's runDuration 100ms: %v\n%s", err, out)
	}

	s.MustKubectl(t, "root", "", "patch", "fleet", name, "--type=merge", "-p", `{"spec":{"simulation":null}}`)
	membersHold(t, s, members, "simulation", "")

	_, err = fleets.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"simulation":{"runDuration":"soon"}}}`),
		metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("a Fleet with runDuration soon: want 422, got %v", err)
	}
}
