// Package leader runs work that must run on one kplane server at a time
// when several serve one datastore: each kind of work (the plane
// lifecycle, the generic controllers, the workload simulation) has a
// coordination.k8s.io Lease in the root plane's kube-system namespace, and
// the server holding it runs that work. A term is started afresh each time
// the Lease is won and its context is cancelled when it is lost, so a
// server that loses the Lease keeps serving the API and can win it again
// later.
package leader
