package audit

import (
	"context"
	"net/http"
	"strconv"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// PathAuthorizer lets every authenticated user reach /audit (get, and
// watch to follow) in every plane; the handler then asks the plane's
// authorization about the kplane.dev "audit" resource and answers 403.
func PathAuthorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.IsResourceRequest() || a.GetPath() != Path || (a.GetVerb() != "get" && a.GetVerb() != "watch") {
			return authorizer.DecisionNoOpinion, "", nil
		}
		if u := a.GetUser(); u != nil {
			for _, g := range u.GetGroups() {
				if g == user.AllAuthenticated {
					return authorizer.DecisionAllow, "the audit handler authorizes the trail itself", nil
				}
			}
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

// RequestInfoResolver marks GET /audit?watch=true as a watch: no request
// timeout, no max-in-flight seat, ended when its plane is deleted.
type RequestInfoResolver struct {
	Delegate request.RequestInfoResolver
}

// NewRequestInfo implements request.RequestInfoResolver.
func (r RequestInfoResolver) NewRequestInfo(req *http.Request) (*request.RequestInfo, error) {
	info, err := r.Delegate.NewRequestInfo(req)
	if err != nil || info.IsResourceRequest || info.Path != Path || info.Verb != "get" {
		return info, err
	}
	if watch, err := strconv.ParseBool(req.URL.Query().Get("watch")); err == nil && watch {
		info.Verb = "watch"
	}
	return info, nil
}
