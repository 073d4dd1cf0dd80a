package bootstrap

import (
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	flowcontrolbootstrap "k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// Policy selects the RBAC (and, in full, the priority-and-fairness
// configuration) a plane starts with.
type Policy string

const (
	// MinimalPolicy: the roles users rely on (cluster-admin, admin, edit,
	// view with their aggregated rules, system:basic-user,
	// system:discovery, system:public-info-viewer) and their bindings.
	MinimalPolicy Policy = "minimal"
	// FullPolicy: the complete upstream bootstrap policy, and the
	// mandatory and suggested FlowSchemas and PriorityLevelConfigurations
	// kube-apiserver keeps in a cluster.
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

// policyObject is an object of the bootstrap policy and the resource it is
// stored as.
type policyObject struct {
	resource string
	object   runtime.Object
}

type policyObjectList []policyObject

func (r policyObjectList) all() []policyObject { return r }

// policyObjects returns the objects of a bootstrap policy: its RBAC, with
// the rules of aggregated roles filled in (admin, edit and view aggregate
// the system:aggregate-to-* roles), and in full the flowcontrol objects.
func policyObjects(p Policy) policyObjectList {
	roles := bootstrappolicy.ClusterRoles()
	bindings := bootstrappolicy.ClusterRoleBindings()
	if p != FullPolicy {
		roles = filter(roles, func(r rbacv1.ClusterRole) bool { return minimalRoles[r.Name] })
		bindings = filter(bindings, func(b rbacv1.ClusterRoleBinding) bool { return minimalRoles[b.RoleRef.Name] })
	}
	aggregate(roles)
	var out policyObjectList
	for i := range roles {
		out = append(out, policyObject{"clusterroles", &roles[i]})
	}
	for i := range bindings {
		out = append(out, policyObject{"clusterrolebindings", &bindings[i]})
	}
	if p == FullPolicy {
		for ns, rs := range bootstrappolicy.NamespaceRoles() {
			for i := range rs {
				rs[i].Namespace = ns
				out = append(out, policyObject{"roles", &rs[i]})
			}
		}
		for ns, bs := range bootstrappolicy.NamespaceRoleBindings() {
			for i := range bs {
				bs[i].Namespace = ns
				out = append(out, policyObject{"rolebindings", &bs[i]})
			}
		}
		out = append(out, flowControlObjects()...)
	}
	return out
}

// flowControlObjects are the priority-and-fairness objects kube-apiserver's
// config producer keeps in a cluster. Written once: nothing re-creates a
// mandatory one a tenant deletes, and none of them configures the server's
// own fairness.
func flowControlObjects() []policyObject {
	var out []policyObject
	levels := append(slices.Clone(flowcontrolbootstrap.MandatoryPriorityLevelConfigurations),
		flowcontrolbootstrap.SuggestedPriorityLevelConfigurations...)
	for _, pl := range levels {
		// Copies: the upstream values are shared, and writing defaults them.
		out = append(out, policyObject{"prioritylevelconfigurations", pl.DeepCopy()})
	}
	schemas := append(slices.Clone(flowcontrolbootstrap.MandatoryFlowSchemas), flowcontrolbootstrap.SuggestedFlowSchemas...)
	for _, fs := range schemas {
		out = append(out, policyObject{"flowschemas", fs.DeepCopy()})
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
