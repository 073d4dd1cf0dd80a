package planens

import "testing"

func TestJoinSplit(t *testing.T) {
	folded := Join("team-a", "default")
	if folded != "team-a|default" {
		t.Fatalf("Join: %q", folded)
	}
	plane, rest, ok := Split(folded)
	if !ok || plane != "team-a" || rest != "default" {
		t.Fatalf("Split(%q) = %q, %q, %v", folded, plane, rest, ok)
	}
	for _, s := range []string{"default", "", "|default"} {
		if _, rest, ok := Split(s); ok || rest != s {
			t.Errorf("Split(%q) = %q, %v: want no plane", s, rest, ok)
		}
	}
	if Strip("default") != "default" || Plane("default") != "" {
		t.Error("an unfolded name must pass unchanged")
	}
}
