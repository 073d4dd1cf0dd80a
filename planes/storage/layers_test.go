package storage

import (
	"slices"
	"testing"
)

// stack is a Layers of fixed templates: plane -> its template.
type stack map[string]string

func (s stack) Template(plane string) (string, bool) { t, ok := s[plane]; return t, ok }

func (s stack) Dependents(plane string) []string {
	var out []string
	for p, t := range s {
		if t == plane {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func (s stack) ResetRevision(string) uint64 { return 0 }

// TestChainAndMembers: a plane's chain is its templates, nearest first;
// its members are the planes made from it and from those, nearest first.
func TestChainAndMembers(t *testing.T) {
	r := NewRegistry()
	if got := r.Members("base"); got != nil {
		t.Fatalf("members without layers: %v", got)
	}
	r.SetLayers(stack{"scenario": "base", "a": "scenario", "b": "scenario", "a-clone": "a", "other": "base"})
	if got, want := r.Chain("a-clone"), []string{"a", "scenario", "base"}; !slices.Equal(got, want) {
		t.Fatalf("chain of a-clone: %v, want %v", got, want)
	}
	if got, want := r.Members("scenario"), []string{"a", "b", "a-clone"}; !slices.Equal(got, want) {
		t.Fatalf("members of scenario: %v, want %v", got, want)
	}
	if got := r.Members("b"); len(got) != 0 {
		t.Fatalf("members of a plane without any: %v", got)
	}
}
