package auth

import (
	"context"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/registry/authentication/tokenreview"

	"kplane.dev/kplane/planes"
)

// TokenReviews is the TokenReview storage of every plane: a token is
// reviewed by the server's request authenticator as if it came with a
// request to the plane the review was posted to. So a plane's
// service-account tokens are authenticated in that plane's reviews only,
// and every other credential is judged exactly as a request to the plane
// would be (the server-wide admin token, valid for requests to every plane,
// is authenticated in every plane's reviews).
//
// The upstream storage authenticates a request it builds itself, without
// the caller's context; each review here runs the upstream storage with an
// authenticator bound to the review's plane.
type TokenReviews struct {
	*tokenreview.REST
	authenticator authenticator.Request
	audiences     []string
}

var (
	_ rest.Creater              = &TokenReviews{}
	_ rest.Scoper               = &TokenReviews{}
	_ rest.SingularNameProvider = &TokenReviews{}
	_ authenticator.Request     = inPlane{}
)

// NewTokenReviews reviews tokens with a (the server's request
// authenticator) for the default audiences.
func NewTokenReviews(a authenticator.Request, audiences []string) *TokenReviews {
	return &TokenReviews{REST: tokenreview.NewREST(a, audiences), authenticator: a, audiences: audiences}
}

// Create reviews the token of obj in the plane of ctx.
func (r *TokenReviews) Create(ctx context.Context, obj runtime.Object, validate rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
	plane, ok := planes.FromContext(ctx)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("token review without a plane"))
	}
	return tokenreview.NewREST(inPlane{plane: plane, delegate: r.authenticator}, r.audiences).Create(ctx, obj, validate, opts)
}

// inPlane authenticates requests as if they were sent to plane.
type inPlane struct {
	plane    string
	delegate authenticator.Request
}

func (p inPlane) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	return p.delegate.AuthenticateRequest(req.WithContext(planes.WithPlane(req.Context(), p.plane)))
}
