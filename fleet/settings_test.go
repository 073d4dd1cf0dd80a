package fleet

import (
	"encoding/json"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kplane.dev/kplane/planes/lifecycle"
)

// The patch gives a member exactly the Fleet's simulation, whatever the
// member held before, and keeps everything else of the Plane.
func TestSimulationPatch(t *testing.T) {
	fast := &lifecycle.SimulationSpec{RunDuration: &metav1.Duration{Duration: 200 * time.Millisecond}}
	old := map[string]any{"readyDelay": "2s", "runDuration": "1s"}
	for _, c := range []struct {
		what       string
		plane      map[string]any
		simulation *lifecycle.SimulationSpec
		want       map[string]any
	}{{
		what:       "a member without a simulation gets the Fleet's",
		plane:      map[string]any{"metadata": map[string]any{"name": "m", "resourceVersion": "7"}, "spec": map[string]any{"template": "t"}},
		simulation: fast,
		want: map[string]any{"metadata": map[string]any{"name": "m", "resourceVersion": "7",
			"annotations": map[string]any{SimulationAnnotation: simulationDigest(fast)}},
			"spec": map[string]any{"template": "t", "simulation": map[string]any{"runDuration": "200ms"}}},
	}, {
		what: "the Fleet's replaces the member's whole, fields it no longer sets included",
		plane: map[string]any{"metadata": map[string]any{"name": "m", "resourceVersion": "7",
			"annotations": map[string]any{SimulationAnnotation: "old", "a": "b"}}, "spec": map[string]any{"simulation": old}},
		simulation: fast,
		want: map[string]any{"metadata": map[string]any{"name": "m", "resourceVersion": "7",
			"annotations": map[string]any{SimulationAnnotation: simulationDigest(fast), "a": "b"}},
			"spec": map[string]any{"simulation": map[string]any{"runDuration": "200ms"}}},
	}, {
		what: "a Fleet that no longer sets one takes the member's away",
		plane: map[string]any{"metadata": map[string]any{"name": "m", "resourceVersion": "7",
			"annotations": map[string]any{SimulationAnnotation: "old", "a": "b"}}, "spec": map[string]any{"simulation": old}},
		want: map[string]any{"metadata": map[string]any{"name": "m", "resourceVersion": "7",
			"annotations": map[string]any{"a": "b"}}, "spec": map[string]any{}},
	}, {
		what:       "a Plane without a spec gets one",
		plane:      map[string]any{"metadata": map[string]any{"name": "m", "resourceVersion": "7"}},
		simulation: fast,
		want: map[string]any{"metadata": map[string]any{"name": "m", "resourceVersion": "7",
			"annotations": map[string]any{SimulationAnnotation: simulationDigest(fast)}},
			"spec": map[string]any{"simulation": map[string]any{"runDuration": "200ms"}}},
	}} {
		t.Run(c.what, func(t *testing.T) {
			p := &unstructured.Unstructured{Object: c.plane}
			ops, err := json.Marshal(simulationPatch(p, c.simulation, simulationDigest(c.simulation)))
			if err != nil {
				t.Fatal(err)
			}
			patch, err := jsonpatch.DecodePatch(ops)
			if err != nil {
				t.Fatalf("%s: %v", ops, err)
			}
			before, err := json.Marshal(c.plane)
			if err != nil {
				t.Fatal(err)
			}
			after, err := patch.Apply(before)
			if err != nil {
				t.Fatalf("applying %s to %s: %v", ops, before, err)
			}
			var got map[string]any
			if err := json.Unmarshal(after, &got); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, c.want) {
				t.Errorf("patch %s\ngave %s", ops, after)
			}
		})
	}
}

// A digest names the simulation: equal specs, equal digests; none, none.
func TestSimulationDigest(t *testing.T) {
	a := &lifecycle.SimulationSpec{ReadyDelay: &metav1.Duration{Duration: time.Second}}
	b := &lifecycle.SimulationSpec{ReadyDelay: &metav1.Duration{Duration: time.Second}}
	c := &lifecycle.SimulationSpec{ReadyDelay: &metav1.Duration{Duration: 2 * time.Second}}
	if simulationDigest(nil) != "" {
		t.Error("no simulation has a digest")
	}
	if simulationDigest(a) != simulationDigest(b) || simulationDigest(a) == simulationDigest(c) {
		t.Errorf("digests %q %q %q", simulationDigest(a), simulationDigest(b), simulationDigest(c))
	}
}
