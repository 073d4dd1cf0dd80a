// Package bootstrap brings a plane into being: it writes the objects every
// Kubernetes cluster starts with (the system namespaces with their default
// ServiceAccount and kube-root-ca.crt, the default/kubernetes Service, the
// RBAC roles and, with the full policy, the priority-and-fairness
// configuration) straight into storage, before the plane is Ready.
// Bootstrap is idempotent and runs once per plane per process; concurrent
// first requests to the same plane share one bootstrap.
package bootstrap
