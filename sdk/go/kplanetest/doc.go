// Package kplanetest gives every Go test a Kubernetes API of its own: a
// fresh kplane plane, ready in milliseconds, deleted when the test ends.
// It is the kplane counterpart of controller-runtime's envtest, which
// starts one etcd and one kube-apiserver for a whole test binary and
// makes its tests share them.
//
//	func TestMain(m *testing.M) {
//		kplanetest.Main(m, kplanetest.Options{CRDDirectoryPaths: []string{"../../config/crd/bases"}})
//	}
//
//	func TestReconcile(t *testing.T) {
//		t.Parallel()
//		cfg := kplanetest.Plane(t) // *rest.Config of a new plane, CRDs Established
//		...
//	}
//
// Start runs one kplane server for the test binary (the binary named by
// KPLANE_BINARY, the kplane in PATH, or a release downloaded into a cache
// and checked against its sha256sums.txt) or attaches to a running one
// (KPLANE_URL with KPLANE_TOKEN, or the admin kubeconfig in
// KPLANE_KUBECONFIG). Every plane an Env creates carries the label
// RunLabel with the Env's run id; Stop deletes whatever planes of the run
// are left.
//
// WithWebhooks gives a plane the admission and conversion webhooks a test
// serves itself on localhost (PlaneHandle.Webhook), as envtest's
// WebhookInstallOptions does for its one cluster.
//
// The package depends on client-go and apimachinery only: a test binary
// that uses it does not link the kplane server.
package kplanetest
