package auth

import (
	"context"
	"crypto"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/serviceaccount"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"kplane.dev/kplane/planes"
)

// Issuer is the service-account token issuer of plane: the URL the plane is
// served at.
func Issuer(externalURL, plane string) string {
	return externalURL + planes.Path(plane)
}

// ServiceAccountRegistries reads the objects a service-account token may be
// bound to, in the plane of the context. The authenticator is built before
// the APIs are installed, so these read through storage that exists first.
type ServiceAccountRegistries struct {
	ServiceAccounts rest.Getter
	Pods            rest.Getter
	Secrets         rest.Getter
	Nodes           rest.Getter
}

// ServiceAccountTokens authenticates service-account tokens in the plane of
// the request.
type ServiceAccountTokens struct {
	externalURL string
	// forIssuer builds the upstream JWT authenticator for one issuer (the
	// claims type of the upstream validator is not nameable here).
	forIssuer func(issuer string) authenticator.Token
}

// NewServiceAccountTokens verifies tokens signed by key.
func NewServiceAccountTokens(externalURL string, key crypto.Signer, audiences authenticator.Audiences, regs ServiceAccountRegistries) (*ServiceAccountTokens, error) {
	keys, err := serviceaccount.StaticPublicKeysGetter([]interface{}{key.Public()})
	if err != nil {
		return nil, err
	}
	validator := serviceaccount.NewValidator(&tokenGetter{regs})
	return &ServiceAccountTokens{
		externalURL: externalURL,
		forIssuer: func(issuer string) authenticator.Token {
			return serviceaccount.JWTTokenAuthenticator([]string{issuer}, keys, audiences, validator)
		},
	}, nil
}

// AuthenticateToken implements authenticator.Token. A token whose issuer is
// not the request's plane is not handled here (and so fails
// authentication), whatever plane issued it.
func (s *ServiceAccountTokens) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	plane, ok := planes.FromContext(ctx)
	if !ok {
		return nil, false, nil
	}
	return s.forIssuer(Issuer(s.externalURL, plane)).AuthenticateToken(ctx, token)
}

// tokenGetter reads the objects a token names from the plane of ctx.
type tokenGetter struct{ regs ServiceAccountRegistries }

// get reads name from the watch cache, and from the datastore when the
// cache does not hold it: a token minted for a service account created a
// moment ago is valid before the cache has caught up (clients create one
// and use its token at once), as upstream's getter falls back from its
// informers to a live read.
func get[T runtime.Object](ctx context.Context, g rest.Getter, resource, name string, out T) (T, error) {
	var zero T
	if g == nil {
		return zero, apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
	}
	obj, err := g.Get(ctx, name, &metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		obj, err = g.Get(ctx, name, &metav1.GetOptions{})
	}
	if err != nil {
		return zero, err
	}
	if err := legacyscheme.Scheme.Convert(obj, out, nil); err != nil {
		return zero, err
	}
	return out, nil
}

func (t *tokenGetter) GetServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	return get(withNamespace(ctx, namespace), t.regs.ServiceAccounts, "serviceaccounts", name, &corev1.ServiceAccount{})
}

func (t *tokenGetter) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return get(withNamespace(ctx, namespace), t.regs.Pods, "pods", name, &corev1.Pod{})
}

func (t *tokenGetter) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return get(withNamespace(ctx, namespace), t.regs.Secrets, "secrets", name, &corev1.Secret{})
}

func (t *tokenGetter) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return get(withNamespace(ctx, ""), t.regs.Nodes, "nodes", name, &corev1.Node{})
}

func (t *tokenGetter) GetValidatingWebhookConfiguration(_ context.Context, name string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	return nil, apierrors.NewNotFound(admissionregistrationv1.Resource("validatingwebhookconfigurations"), name)
}

func (t *tokenGetter) GetMutatingWebhookConfiguration(_ context.Context, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	return nil, apierrors.NewNotFound(admissionregistrationv1.Resource("mutatingwebhookconfigurations"), name)
}
