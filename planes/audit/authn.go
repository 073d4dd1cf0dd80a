package audit

import (
	"net/http"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"kplane.dev/kplane/planes"
)

// planeUser is an authenticated user carrying its request's audit level
// from authentication to the audit filter, which runs right after it and
// asks the policy with the request's attributes only. Filter unwraps it
// before the plane's handlers run.
type planeUser struct {
	user.Info
	level Level
}

// Authenticator wraps the server's authenticator: a request it
// authenticates for a plane audited at a level other than None carries
// that level on its user and the plane on its audit event.
type Authenticator struct {
	Delegate authenticator.Request
	Planes   Planes
}

// AuthenticateRequest implements authenticator.Request.
func (a Authenticator) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	resp, ok, err := a.Delegate.AuthenticateRequest(req)
	if !ok || err != nil || resp == nil || resp.User == nil {
		return resp, ok, err
	}
	ctx := req.Context()
	plane, found := planes.FromContext(ctx)
	if !found {
		return resp, ok, err
	}
	// An unknown plane may be provisioned by this very request: it is
	// audited at the default level, and kept if the plane exists once the
	// request ends.
	level := DefaultLevel
	if _, l, exists := a.Planes.Lookup(plane); exists {
		level = l
	}
	if level == auditinternal.LevelNone {
		return resp, ok, err
	}
	audit.AddAuditAnnotation(ctx, planes.Annotation, plane)
	// The response may be a cached one shared by many requests: copied.
	return &authenticator.Response{User: &planeUser{Info: resp.User, level: level}, Audiences: resp.Audiences}, ok, err
}

// unwrapUser puts the authenticated user itself back into the request.
func unwrapUser(req *http.Request) *http.Request {
	if u, ok := request.UserFrom(req.Context()); ok {
		if pu, wrapped := u.(*planeUser); wrapped {
			return req.WithContext(request.WithUser(req.Context(), pu.Info))
		}
	}
	return req
}
