// Package clusterroleaggregation fills in the rules of every ClusterRole
// that has an aggregationRule (admin, edit, view, and any a tenant writes)
// from the ClusterRoles its selectors match in the same plane, for every
// plane: what upstream's clusterrole-aggregation controller does per
// cluster, with the same algorithm (selectors in order, matching roles by
// name, each rule once) and the same field manager.
//
// The upstream controller cannot be driven for many planes: it reads
// through a ClusterRoleLister, whose Get and List take no context and so
// cannot know the plane, and its sync is reachable only through its own
// queue fed by one informer. So this package carries the same logic over
// the shared watch cache. A work item is a plane: any ClusterRole event of
// the plane queues it (as upstream queues every aggregated role on any
// event) and is synced once the plane is bootstrapped (its lifecycle phase
// is Ready) and its roles have not changed for a second, so that roles
// written in parallel by a bootstrap are never aggregated half-written. One
// sync recomputes the plane's aggregated roles from the cache and applies
// those whose rules changed through the plane's loopback client. Nothing
// is held per plane between syncs.
//
// Rules are compared as sets: bootstrap roles already hold their aggregate
// (in the policy's order), and reordering them would cost every plane
// writes for nothing.
package clusterroleaggregation
