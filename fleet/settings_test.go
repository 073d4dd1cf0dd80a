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

// The patch gives a member exactly the Fleet's settings it was not given
// yet, whatever the member held before, and keeps everything else.
func TestSettingsPatch(t *testing.T) {
	fast := &Fleet{Spec: Spec{Simulation: &lifecycle.SimulationSpec{RunDuration: &metav1.Duration{Duration: 200 * time.Millisecond}}}}
	audited := &Fleet{Spec: Spec{Simulation: fast.Spec.Simulation, Audit: &lifecycle.AuditSpec{Level: "Request"}}}
	digest := func(f *Fleet, field string) string {
		settings, err := memberSettings(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range settings {
			if s.field == field {
				return s.digest()
			}
		}
		t.Fatalf("no setting %s", field)
		return ""
	}
	old := map[string]any{"readyDelay": "2s", "runDuration": "1s"}
	meta := func(annotations map[string]any) map[string]any {
		m := map[string]any{"name": "m", "resourceVersion": "7"}
		if annotations != nil {
			m["annotations"] = annotations
		}
		return m
	}
	for _, c := range []struct {
		what  string
		plane map[string]any
		fleet *Fleet
		want  map[string]any // nil: no patch
	}{{
		what:  "a member without settings gets the Fleet's",
		plane: map[string]any{"metadata": meta(nil), "spec": map[string]any{"template": "t"}},
		fleet: fast,
		want: map[string]any{"metadata": meta(map[string]any{SimulationAnnotation: digest(fast, "simulation")}),
			"spec": map[string]any{"template": "t", "simulation": map[string]any{"runDuration": "200ms"}}},
	}, {
		what: "the Fleet's replaces the member's whole, fields it no longer sets included",
		plane: map[string]any{"metadata": meta(map[string]any{SimulationAnnotation: "old", "a": "b"}),
			"spec": map[string]any{"simulation": old}},
		fleet: fast,
		want: map[string]any{"metadata": meta(map[string]any{SimulationAnnotation: digest(fast, "simulation"), "a": "b"}),
			"spec": map[string]any{"simulation": map[string]any{"runDuration": "200ms"}}},
	}, {
		what: "a setting already given stays as the member changed it; a new one is added",
		plane: map[string]any{"metadata": meta(map[string]any{SimulationAnnotation: digest(fast, "simulation")}),
			"spec": map[string]any{"simulation": old}},
		fleet: audited,
		want: map[string]any{"metadata": meta(map[string]any{SimulationAnnotation: digest(fast, "simulation"),
			AuditAnnotation: digest(audited, "audit")}),
			"spec": map[string]any{"simulation": old, "audit": map[string]any{"level": "Request"}}},
	}, {
		what: "a Fleet that no longer sets one takes the member's away",
		plane: map[string]any{"metadata": meta(map[string]any{SimulationAnnotation: "old", "a": "b"}),
			"spec": map[string]any{"simulation": old}},
		fleet: &Fleet{},
		want:  map[string]any{"metadata": meta(map[string]any{"a": "b"}), "spec": map[string]any{}},
	}, {
		what:  "a Plane without a spec gets one",
		plane: map[string]any{"metadata": meta(nil)},
		fleet: fast,
		want: map[string]any{"metadata": meta(map[string]any{SimulationAnnotation: digest(fast, "simulation")}),
			"spec": map[string]any{"simulation": map[string]any{"runDuration": "200ms"}}},
	}, {
		what:  "a member the Fleet never set anything on, of a Fleet that sets nothing, is left alone",
		plane: map[string]any{"metadata": meta(nil), "spec": map[string]any{"simulation": old}},
		fleet: &Fleet{},
	}} {
		t.Run(c.what, func(t *testing.T) {
			settings, err := memberSettings(c.fleet)
			if err != nil {
				t.Fatal(err)
			}
			p := &unstructured.Unstructured{Object: c.plane}
			ops := settingsPatch(p, settings)
			if c.want == nil {
				if len(ops) != 0 {
					t.Fatalf("patch %+v, want none", ops)
				}
				return
			}
			data, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			patch, err := jsonpatch.DecodePatch(data)
			if err != nil {
				t.Fatalf("%s: %v", data, err)
			}
			before, err := json.Marshal(c.plane)
			if err != nil {
				t.Fatal(err)
			}
			after, err := patch.Apply(before)
			if err != nil {
				t.Fatalf("applying %s to %s: %v", data, before, err)
			}
			var got map[string]any
			if err := json.Unmarshal(after, &got); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got, c.want) {
				t.Errorf("patch %s\ngave %s", data, after)
			}
		})
	}
}
