package auth

import (
	"context"
	"net/http"
	"strconv"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// SelfAuthorizedPath lets every authenticated user reach the non-resource
// path (get, and watch to follow it) in every plane, as discovery is. It
// grants nothing else: the path's handler asks the plane's authorization
// about what it serves and answers 403 itself. reason is the decision's.
func SelfAuthorizedPath(path, reason string) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.IsResourceRequest() || a.GetPath() != path || (a.GetVerb() != "get" && a.GetVerb() != "watch") {
			return authorizer.DecisionNoOpinion, "", nil
		}
		if u := a.GetUser(); u != nil {
			for _, g := range u.GetGroups() {
				if g == user.AllAuthenticated {
					return authorizer.DecisionAllow, reason, nil
				}
			}
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

// WatchablePath marks GET Path?watch=true as a watch, so that every filter
// that treats watches specially does so for it too: no request timeout, no
// max-in-flight seat, closed on shutdown and when its plane is deleted.
// What it serves bounds its followers itself.
type WatchablePath struct {
	Path     string
	Delegate request.RequestInfoResolver
}

// NewRequestInfo implements request.RequestInfoResolver.
func (r WatchablePath) NewRequestInfo(req *http.Request) (*request.RequestInfo, error) {
	info, err := r.Delegate.NewRequestInfo(req)
	if err != nil || info.IsResourceRequest || info.Path != r.Path || info.Verb != "get" {
		return info, err
	}
	if watch, err := strconv.ParseBool(req.URL.Query().Get("watch")); err == nil && watch {
		info.Verb = "watch"
	}
	return info, nil
}
