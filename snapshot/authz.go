package snapshot

import (
	"context"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// PathAuthorizer lets every authenticated user reach /snapshot (get, and
// watch for a delta stream) in every plane, as discovery is. It grants
// nothing else: the snapshot server asks the server's authorizer about
// each resource it reads, in the plane of the request, and answers 403
// when the caller may read none.
func PathAuthorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.IsResourceRequest() || a.GetPath() != Path || (a.GetVerb() != "get" && a.GetVerb() != "watch") {
			return authorizer.DecisionNoOpinion, "", nil
		}
		if u := a.GetUser(); u != nil {
			for _, g := range u.GetGroups() {
				if g == user.AllAuthenticated {
					return authorizer.DecisionAllow, "every resource of a snapshot is authorized on its own", nil
				}
			}
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

// RequestInfoResolver marks a delta stream (GET /snapshot?watch=true) as
// a watch, so that every filter that treats watches specially does so for
// it too: no request timeout, no max-in-flight slot, closed on shutdown and
// when its plane is deleted. The snapshot server bounds streams itself
// (StreamLimits).
type RequestInfoResolver struct {
	Delegate request.RequestInfoResolver
}

// NewRequestInfo implements request.RequestInfoResolver.
func (r RequestInfoResolver) NewRequestInfo(req *http.Request) (*request.RequestInfo, error) {
	info, err := r.Delegate.NewRequestInfo(req)
	if err != nil || info.IsResourceRequest || info.Path != Path || info.Verb != "get" {
		return info, err
	}
	if isWatch(req.URL.Query()) {
		info.Verb = "watch"
	}
	return info, nil
}
