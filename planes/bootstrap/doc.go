// Package bootstrap brings a plane into being: it writes the objects every
// Kubernetes cluster starts with (the system namespaces) the first time an
// authenticated request reaches a plane, before that request is served.
// Bootstrap is idempotent and runs once per plane per process; concurrent
// first requests to the same plane share one bootstrap.
package bootstrap
