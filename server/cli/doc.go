// Package cli holds the client-side commands of the kplane binary:
// `kplane kubeconfig` (plane-bound credentials) and `kplane planes`
// (list, create, delete). They talk to a running server with the admin
// kubeconfig it wrote.
package cli
