package clusterroleaggregation

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"kplane.dev/kplane/planes/lifecycle"
)

func rule(verb, resource string) rbac.PolicyRule {
	return rbac.PolicyRule{Verbs: []string{verb}, APIGroups: []string{""}, Resources: []string{resource}}
}

func role(name string, labels map[string]string, rules ...rbac.PolicyRule) *rbac.ClusterRole {
	return &rbac.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules}
}

func selects(pairs ...string) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{pairs[0]: pairs[1]}}
}

// TestAggregate holds the upstream controller's order: selectors in turn,
// matching roles by name, each rule once, the role itself never.
func TestAggregate(t *testing.T) {
	aggregated := role("view", map[string]string{"view": "true"}, rule("get", "stale"))
	aggregated.AggregationRule = &rbac.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
		selects("second", "true"), selects("view", "true"),
	}}
	sorted := []*rbac.ClusterRole{
		role("a", map[string]string{"view": "true"}, rule("get", "pods"), rule("list", "pods")),
		role("b", map[string]string{"second": "true"}, rule("get", "secrets")),
		role("c", map[string]string{"view": "true", "second": "true"}, rule("get", "pods"), rule("get", "nodes")),
		role("d", map[string]string{"other": "true"}, rule("get", "ignored")),
		aggregated,
	}
	got, err := aggregate(aggregated, sorted)
	if err != nil {
		t.Fatal(err)
	}
	want := []rbac.PolicyRule{rule("get", "secrets"), rule("get", "pods"), rule("get", "nodes"), rule("list", "pods")}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("aggregated rules\n got %v\nwant %v", got, want)
	}

	bad := role("bad", nil)
	bad.AggregationRule = &rbac.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Bogus"}}}}}
	if _, err := aggregate(bad, sorted); err == nil {
		t.Fatal("an invalid selector must be an error")
	}
}

// TestSameRules: order and repetition do not count, content does.
func TestSameRules(t *testing.T) {
	a := []rbac.PolicyRule{rule("get", "pods"), rule("get", "nodes")}
	for _, tc := range []struct {
		name string
		b    []rbac.PolicyRule
		same bool
	}{
		{"reordered", []rbac.PolicyRule{rule("get", "nodes"), rule("get", "pods")}, true},
		{"repeated", []rbac.PolicyRule{rule("get", "nodes"), rule("get", "pods"), rule("get", "nodes")}, true},
		{"missing", []rbac.PolicyRule{rule("get", "nodes")}, false},
		{"extra", []rbac.PolicyRule{rule("get", "nodes"), rule("get", "pods"), rule("get", "secrets")}, false},
		{"empty", nil, false},
	} {
		if got := sameRules(a, tc.b); got != tc.same {
			t.Errorf("%s: sameRules = %v, want %v", tc.name, got, tc.same)
		}
	}
	if !sameRules(nil, []rbac.PolicyRule{}) {
		t.Error("nil and empty rules are the same")
	}
	if !sameRules([]rbac.PolicyRule{{Verbs: []string{"get"}}}, []rbac.PolicyRule{{Verbs: []string{"get"}, Resources: []string{}}}) {
		t.Error("a nil and an empty list in a rule are the same")
	}
	for _, pair := range [][2]rbac.PolicyRule{
		{{Verbs: []string{"get"}}, {Resources: []string{"get"}}},
		{{Verbs: []string{"a:b"}}, {Verbs: []string{"a", "b"}}},
		{{Verbs: []string{""}}, {Verbs: []string{}}},
		{{Verbs: []string{"a"}, APIGroups: []string{"b"}}, {Verbs: []string{"a", "b"}}},
	} {
		if sameRules(pair[:1], pair[1:]) {
			t.Errorf("%+v and %+v are different rules", pair[0], pair[1])
		}
	}
}

// TestQuiet: a plane is due once its roles have not changed for settle,
// however long they kept changing before, and is then forgotten.
func TestQuiet(t *testing.T) {
	now := time.Unix(0, 0)
	q := newQuiet(func() time.Time { return now })
	if q.wait("unknown") != 0 {
		t.Fatal("a plane without changes is due")
	}
	q.changed("p")
	now = now.Add(settle / 2)
	q.changed("p")
	now = now.Add(settle / 2)
	if left := q.wait("p"); left != settle/2 {
		t.Fatalf("changed half a settle ago: %s left, want %s", left, settle/2)
	}
	now = now.Add(settle / 2)
	if left := q.wait("p"); left != 0 {
		t.Fatalf("quiet for a settle: %s left", left)
	}
	if len(q.last) != 0 {
		t.Fatal("a due plane is forgotten")
	}
}

type phases map[string]lifecycle.Phase

func (p phases) Phase(plane string) (lifecycle.Phase, bool) {
	phase, ok := p[plane]
	return phase, ok
}

// TestDue: only a bootstrapped plane is synced; a plane gone or going is
// dropped and forgotten.
func TestDue(t *testing.T) {
	c := &Controller{quiet: newQuiet(time.Now)}
	known := phases{"ready": lifecycle.Ready, "pending": lifecycle.Pending, "terminating": lifecycle.Terminating}
	for plane, want := range map[string]time.Duration{"ready": 0, "pending": settle, "terminating": -1, "unknown": -1} {
		c.quiet.changed(plane)
		got := c.due(plane, known)
		if plane == "ready" && got > 0 {
			// Just changed: it waits for the quiet, then is due.
			c.quiet.last[plane] = time.Now().Add(-settle)
			got = c.due(plane, known)
		}
		if got != want {
			t.Errorf("%s: due = %s, want %s", plane, got, want)
		}
	}
	if _, held := c.quiet.last["terminating"]; held || len(c.quiet.last) != 1 {
		t.Fatalf("only the pending plane is remembered: %v", c.quiet.last)
	}
}
