package auth

import (
	"context"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"kplane.dev/kplane/planes"
)

// TenantPlane returns the plane a request addresses when the plane's
// users made it. The server's own loopback clients (the controllers) act
// for a plane too, but their requests are the consequences of the plane's
// writes, not its users' load: limits and fair queuing leave them alone,
// so a plane at its quota still gets its namespaces deleted and its
// garbage collected.
func TenantPlane(ctx context.Context) (string, bool) {
	plane, ok := planes.FromContext(ctx)
	if !ok {
		return "", false
	}
	if u, _ := request.UserFrom(ctx); u != nil && u.GetName() == user.APIServerUser {
		return "", false
	}
	return plane, true
}
