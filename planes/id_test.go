package planes

import (
	"context"
	"strings"
	"testing"
)

func TestValidateID(t *testing.T) {
	valid := []string{"root", "a", "team-alpha", "rl-0001", strings.Repeat("a", 63), "0abc"}
	for _, id := range valid {
		if err := ValidateID(id); err != nil {
			t.Errorf("ValidateID(%q) = %v, want nil", id, err)
		}
	}
	invalid := []string{"", "Bad_ID", "UPPER", "-lead", "trail-", "a.b", "..", "a/b", "a%2Fb", "*", strings.Repeat("a", 64), "with space"}
	for _, id := range invalid {
		if err := ValidateID(id); err == nil {
			t.Errorf("ValidateID(%q) = nil, want error", id)
		}
	}
}

func TestContext(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Fatal("empty context must carry no plane")
	}
	ctx := WithPlane(context.Background(), "a")
	if id, ok := FromContext(ctx); !ok || id != "a" {
		t.Fatalf("FromContext = %q, %v", id, ok)
	}
	if _, ok := FromContext(WithPlane(context.Background(), "")); ok {
		t.Fatal("an empty plane id must not count as a plane")
	}
}

func TestDescribeNames(t *testing.T) {
	for _, c := range []struct {
		names []string
		want  string
	}{
		{nil, ""},
		{[]string{"b", "a"}, "a, b"},
		{[]string{"g", "f", "e", "d", "c", "b", "a"}, "a, b, c, d, e and 2 more"},
	} {
		if got := DescribeNames(c.names); got != c.want {
			t.Errorf("DescribeNames(%v) = %q, want %q", c.names, got, c.want)
		}
	}
}
