package snapshot

import (
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kplane.dev/kplane/planes/auth"
)

// PathAuthorizer lets every authenticated user reach /snapshot (get, and
// watch for a delta stream) in every plane, as discovery is. It grants
// nothing else: the snapshot server asks the server's authorizer about
// each resource it reads, in the plane of the request, and answers 403
// when the caller may read none.
func PathAuthorizer() authorizer.Authorizer {
	return auth.SelfAuthorizedPath(Path, "every resource of a snapshot is authorized on its own")
}
