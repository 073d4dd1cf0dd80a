package lifecycle

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// A member inherits its template's objects until it is being deleted, and
// whoever follows inheritance hears of each change, once.
func TestInheritsFollowsMembers(t *testing.T) {
	m := &Manager{state: map[string]*state{}, dependents: map[string]map[string]struct{}{}, held: map[string]*resetHold{}}
	var told []string
	m.OnInheritanceChange(func(plane string) { told = append(told, plane) })
	plane := func(name, template string, deleting bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
		u.SetName(name)
		u.SetUID(types.UID(name + "-uid"))
		if template != "" {
			_ = unstructured.SetNestedField(u.Object, template, "spec", "template")
		}
		if deleting {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
		}
		return u
	}
	m.observe(plane("scenario", "", false))
	m.observe(plane("episode", "scenario", false))
	m.observe(plane("episode", "scenario", false))
	if got := m.Inherits("episode"); got != "scenario" {
		t.Fatalf("Inherits(episode) = %q, want scenario", got)
	}
	if !slices.Equal(told, []string{"episode"}) {
		t.Fatalf("told %v, want [episode] once", told)
	}
	m.observe(plane("episode", "scenario", true))
	if got := m.Inherits("episode"); got != "" {
		t.Fatalf("Inherits of a member being deleted = %q, want none", got)
	}
	if !slices.Equal(told, []string{"episode", "episode"}) {
		t.Fatalf("told %v, want episode again when its deletion began", told)
	}
	if got := m.Inherits("scenario"); got != "" {
		t.Fatalf("Inherits of a plane made from nothing = %q", got)
	}
}
