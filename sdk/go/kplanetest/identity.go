package kplanetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Identity returns a client config of the plane cfg points at that
// authenticates as its service account namespace/name (created, with the
// namespace, if missing): user "system:serviceaccount:<namespace>:<name>",
// allowed only what the plane's RBAC grants it, and refused by every other
// plane. For RBAC tests: bind roles to it with cfg, then act with the
// returned config.
func Identity(t testing.TB, cfg *rest.Config, namespace, name string) *rest.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), PlaneTimeout)
	defer cancel()
	id, err := NewIdentity(ctx, cfg, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// IdentityTTL is the lifetime of an Identity's token.
const IdentityTTL = time.Hour

// NewIdentity is Identity without a testing.TB.
func NewIdentity(ctx context.Context, cfg *rest.Config, namespace, name string) (*rest.Config, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kplanetest: identity %s/%s: %w", namespace, name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kplanetest: identity %s/%s: %w", namespace, name, err)
	}
	seconds := int64(IdentityTTL.Seconds())
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	resp, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("kplanetest: identity %s/%s: minting a token: %w", namespace, name, err)
	}
	// Only the server and its CA are kept from cfg: none of its
	// credentials (the admin token) may leak into the identity.
	id := rest.AnonymousClientConfig(cfg)
	id.BearerToken = resp.Status.Token
	return id, nil
}
