// Package cli holds the client-side commands of the kplane binary:
// `kplane kubeconfig` (plane-bound credentials), `kplane planes` (list,
// create, delete) and `kplane snapshot` (a plane's whole state). They talk
// to a running server with the admin kubeconfig it wrote.
package cli
