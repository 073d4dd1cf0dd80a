package apiserver

import (
	"context"
	"net/http"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authzpath "k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/registry/generic"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	authenticationrest "k8s.io/kubernetes/pkg/registry/authentication/rest"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/audit"
	"kplane.dev/kplane/planes/auth"
	"kplane.dev/kplane/snapshot"
)

// publicPaths answer without credentials, on the root plane only: health
// and version for probes and load balancers, kplane's own API contract for
// SDK generators, the CA for clients bootstrapping trust, the join
// requests of an embedded etcd cluster (which carry the join token). Nothing that reads or writes plane state is public, and a
// probe of another plane's path never tells whether that plane exists.
var publicPaths = []string{
	"/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*", "/version",
	"/openapi/kplane.yaml", "/openapi/kplane.json",
	caCertsPath,
	etcdMembersPrefix + "*",
}

func isPublicPath(path string) bool {
	for _, p := range publicPaths {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(path, prefix) {
				return true
			}
		} else if path == p {
			return true
		}
	}
	return false
}

// anonymousPublic authenticates requests that carry no credentials as
// system:anonymous when, and only when, they ask for a public path of the
// root plane. Every other request without credentials gets 401.
type anonymousPublic struct {
	delegate authenticator.Request
}

func (a anonymousPublic) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	resp, ok, err := a.delegate.AuthenticateRequest(req)
	// A request that presents credentials and fails authentication is
	// refused even on a public path, as upstream does.
	if ok || err != nil || auth.HasCredentials(req) {
		return resp, ok, err
	}
	if plane, _ := planes.FromContext(req.Context()); plane != planes.Root || !isPublicPath(req.URL.Path) {
		return resp, ok, err
	}
	return &authenticator.Response{User: &user.DefaultInfo{
		Name:   user.Anonymous,
		Groups: []string{user.AllUnauthenticated},
	}}, true, nil
}

// newAuthorizer returns the server's authorizer: members of system:masters
// (the admin credential and the loopback client) may do anything in every
// plane; everyone may read the public paths; every authenticated user may
// ask for a snapshot (which authorizes each resource it reads); everything
// else is decided by the plane's own authorization.
func newAuthorizer(adminUser string, planeRBAC authorizer.Authorizer) (authorizer.Authorizer, error) {
	public, err := authzpath.NewAuthorizer(publicPaths)
	if err != nil {
		return nil, err
	}
	return union.New(
		union.NamedAuthorizer{AuthorizerName: "kplane.dev/masters", Authorizer: authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)},
		union.NamedAuthorizer{AuthorizerName: "kplane.dev/public-paths", Authorizer: public},
		union.NamedAuthorizer{AuthorizerName: "kplane.dev/snapshot", Authorizer: snapshot.PathAuthorizer()},
		union.NamedAuthorizer{AuthorizerName: "kplane.dev/audit", Authorizer: audit.PathAuthorizer()},
		union.NamedAuthorizer{AuthorizerName: "kplane.dev/impersonation", Authorizer: authorizer.AuthorizerFunc(auth.ImpersonationGuard{PrivilegedUsers: []string{adminUser}}.Authorize)},
		union.NamedAuthorizer{AuthorizerName: "kplane.dev/rbac", Authorizer: planeRBAC},
	)
}

// planeTokenReviews installs authentication.k8s.io with TokenReviews that
// authenticate a token as a request to the review's plane would be
// (auth.TokenReviews); the upstream storage reviews every token outside any
// plane, where no service-account token is valid.
type planeTokenReviews struct {
	authenticationrest.RESTStorageProvider
}

func (p planeTokenReviews) NewRESTStorage(resources serverstorage.APIResourceConfigSource, options generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info, err := p.RESTStorageProvider.NewRESTStorage(resources, options)
	if err != nil {
		return info, err
	}
	for _, storages := range info.VersionedResourcesStorageMap {
		if _, ok := storages["tokenreviews"]; ok {
			storages["tokenreviews"] = auth.NewTokenReviews(p.Authenticator, p.APIAudiences)
		}
	}
	return info, nil
}

// noTokenObjects is upstream's service-account token getter for a server
// whose upstream authenticator verifies no service-account token: it finds
// nothing, and needs no informer.
type noTokenObjects struct{}

var _ serviceaccount.ServiceAccountTokenGetter = noTokenObjects{}

func (noTokenObjects) GetServiceAccount(_ context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("serviceaccounts"), name)
}

func (noTokenObjects) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

func (noTokenObjects) GetSecret(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
}

func (noTokenObjects) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
}

func (noTokenObjects) GetValidatingWebhookConfiguration(_ context.Context, name string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	return nil, apierrors.NewNotFound(admissionregistrationv1.Resource("validatingwebhookconfigurations"), name)
}

func (noTokenObjects) GetMutatingWebhookConfiguration(_ context.Context, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	return nil, apierrors.NewNotFound(admissionregistrationv1.Resource("mutatingwebhookconfigurations"), name)
}
