package bootstrap

import (
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// Policy selects the RBAC a plane starts with.
type Policy string

const (
	// MinimalPolicy: the roles users rely on (cluster-admin, admin, edit,
	// view with their aggregated rules, system:basic-user,
	// system:discovery, system:public-info-viewer) and their bindings.
	MinimalPolicy Policy = "minimal"
	// FullPolicy: the complete upstream bootstrap policy.
	FullPolicy Policy = "full"
)

// ParsePolicy validates a --plane-bootstrap value.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(strings.ToLower(s)) {
	case "", MinimalPolicy:
		return MinimalPolicy, nil
	case FullPolicy:
		return FullPolicy, nil
	}
	return "", fmt.Errorf("--plane-bootstrap %q: want minimal or full", s)
}

// minimalRoles are kept from the upstream policy in a minimal bootstrap.
var minimalRoles = map[string]bool{
	"cluster-admin": true, "admin": true, "edit": true, "view": true,
	"system:aggregate-to-admin": true, "system:aggregate-to-edit": true, "system:aggregate-to-view": true,
	"system:basic-user": true, "system:discovery": true, "system:public-info-viewer": true,
}

type rbacObject struct {
	resource string
	object   runtime.Object
}

type rbacObjects []rbacObject

func (r rbacObjects) all() []rbacObject { return r }

// policyObjects returns the RBAC objects of a bootstrap policy, with the
// rules of aggregated roles filled in (admin, edit and view aggregate the
// system:aggregate-to-* roles).
func policyObjects(p Policy) rbacObjects {
	roles := bootstrappolicy.ClusterRoles()
	bindings := bootstrappolicy.ClusterRoleBindings()
	if p != FullPolicy {
		roles = filter(roles, func(r rbacv1.ClusterRole) bool { return minimalRoles[r.Name] })
		bindings = filter(bindings, func(b rbacv1.ClusterRoleBinding) bool { return minimalRoles[b.RoleRef.Name] })
	}
	aggregate(roles)
	var out rbacObjects
	for i := range roles {
		out = append(out, rbacObject{"clusterroles", &roles[i]})
	}
	for i := range bindings {
		out = append(out, rbacObject{"clusterrolebindings", &bindings[i]})
	}
	if p == FullPolicy {
		for ns, rs := range bootstrappolicy.NamespaceRoles() {
			for i := range rs {
				rs[i].Namespace = ns
				out = append(out, rbacObject{"roles", &rs[i]})
			}
		}
		for ns, bs := range bootstrappolicy.NamespaceRoleBindings() {
			for i := range bs {
				bs[i].Namespace = ns
				out = append(out, rbacObject{"rolebindings", &bs[i]})
			}
		}
	}
	return out
}

func filter[T any](in []T, keep func(T) bool) []T {
	var out []T
	for _, x := range in {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// aggregate fills in the rules of every role with an aggregation rule from
// the roles its selectors match, as the upstream aggregation controller
// would once it ran.
func aggregate(roles []rbacv1.ClusterRole) {
	// Aggregated roles can aggregate each other (admin takes edit, which
	// takes view): repeat until nothing changes.
	for pass := 0; pass < len(roles); pass++ {
		if !aggregateOnce(roles) {
			return
		}
	}
}

func aggregateOnce(roles []rbacv1.ClusterRole) bool {
	changed := false
	for i := range roles {
		rule := roles[i].AggregationRule
		if rule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range rule.ClusterRoleSelectors {
			selector, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				continue
			}
			for j := range roles {
				if j != i && selector.Matches(labels.Set(roles[j].Labels)) {
					rules = append(rules, roles[j].Rules...)
				}
			}
		}
		if len(rules) != len(roles[i].Rules) {
			changed = true
		}
		roles[i].Rules = rules
	}
	return changed
}
