// Package namespace finishes the deletion of namespaces in every plane:
// the upstream namespaced-resources deleter
// (k8s.io/kubernetes/pkg/controller/namespace/deletion), driven per plane
// and namespace, deletes the namespace's content in every resource the
// plane serves, custom resources included, reports the upstream
// conditions, and removes the `kubernetes` finalizer.
package namespace
