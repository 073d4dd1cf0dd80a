package audit

import (
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kplane.dev/kplane/planes/auth"
)

// PathAuthorizer lets every authenticated user reach /audit (get, and
// watch to follow) in every plane; the handler then asks the plane's
// authorization about the kplane.dev "audit" resource and answers 403.
func PathAuthorizer() authorizer.Authorizer {
	return auth.SelfAuthorizedPath(Path, "the audit handler authorizes the trail itself")
}
