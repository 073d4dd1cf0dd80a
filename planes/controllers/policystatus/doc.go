// Package policystatus keeps status.typeChecking of every plane's
// ValidatingAdmissionPolicies, as kube-controller-manager's
// ValidatingAdmissionPolicy status controller does for one cluster:
// upstream's type checker run against the kinds the policy matches in its
// plane, the result applied as the status.
package policystatus
