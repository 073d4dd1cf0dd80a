package lifecycle

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kplane.dev/kplane/planes"
)

// knownBases is a Bootstrapper that has bootstrapped the planes it holds.
type knownBases map[string]bool

func (k knownBases) Ensure(context.Context, string) error { return nil }
func (k knownBases) Forget(string)                        {}
func (k knownBases) BaseID() string                       { return "base-a" }
func (k knownBases) Known(plane string) bool              { return k[plane] }

// A Plane is stored Ready at create only when nothing is left to give it:
// on a base this process has bootstrapped, or from a Ready template.
func TestReadyAtCreate(t *testing.T) {
	m := &Manager{
		config: Config{Bootstrapper: knownBases{"base-a": true}},
		state:  map[string]*state{"ready-tmpl": {phase: Ready}, "pending-tmpl": {phase: Pending}, "going-tmpl": {phase: Terminating}},
	}
	plane := func(name, base string, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kplane.dev/v1", "kind": "Plane", "spec": spec}}
		u.SetName(name)
		if base != "" {
			u.SetAnnotations(map[string]string{planes.BaseAnnotation: base})
		}
		return u
	}
	for _, c := range []struct {
		what  string
		in    string
		obj   *unstructured.Unstructured
		ready bool
	}{
		{"made from nothing on a bootstrapped base", planes.Root, plane("p", "base-a", map[string]any{}), true},
		{"on a base not bootstrapped yet", planes.Root, plane("p", "base-b", map[string]any{}), false},
		{"copying the bootstrap (no base)", planes.Root, plane("p", "", map[string]any{}), false},
		{"from a Ready template", planes.Root, plane("p", "", map[string]any{"template": "ready-tmpl"}), true},
		{"from a Pending template", planes.Root, plane("p", "", map[string]any{"template": "pending-tmpl"}), false},
		{"from a template being deleted", planes.Root, plane("p", "", map[string]any{"template": "going-tmpl"}), false},
		{"from an unknown template", planes.Root, plane("p", "", map[string]any{"template": "nowhere"}), false},
		{"a clone", planes.Root, plane("p", "base-a", map[string]any{"from": "ready-tmpl"}), false},
		{"a Plane of another plane's own CRD", "tenant", plane("p", "base-a", map[string]any{}), false},
	} {
		m.ReadyAtCreate(c.in, c.obj)
		phase, _, _ := unstructured.NestedString(c.obj.Object, "status", "phase")
		if got := phase == string(Ready); got != c.ready {
			t.Errorf("%s: stored Ready %v, want %v (status %v)", c.what, got, c.ready, c.obj.Object["status"])
		}
	}
}
