package e2e

import (
	"context"
	"errors"
	"slices"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/test/e2e/framework"
)

// review posts a TokenReview of token with c and returns its status.
func review(t *testing.T, c kubernetes.Interface, token string) authenticationv1.TokenReviewStatus {
	t.Helper()
	r, err := c.AuthenticationV1().TokenReviews().Create(t.Context(),
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a TokenReview: %v", err)
	}
	return r.Status
}

// whoAmI is the user a request with token to plane is authenticated as.
func whoAmI(t *testing.T, plane, token string) authenticationv1.UserInfo {
	t.Helper()
	r, err := clientWithToken(t, shared, plane, token).AuthenticationV1().SelfSubjectReviews().Create(t.Context(),
		&authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview in %s: %v", plane, err)
	}
	return r.Status.UserInfo
}

// expectAuthenticatedAs: the review authenticated the token as the user a
// request with it is authenticated as.
func expectAuthenticatedAs(t *testing.T, where string, got authenticationv1.TokenReviewStatus, want authenticationv1.UserInfo) {
	t.Helper()
	if !got.Authenticated {
		t.Fatalf("%s: token not authenticated (error %q), want %s", where, got.Error, want.Username)
	}
	if got.User.Username != want.Username || got.User.UID != want.UID ||
		!slices.Equal(slices.Sorted(slices.Values(got.User.Groups)), slices.Sorted(slices.Values(want.Groups))) {
		t.Fatalf("%s: authenticated as %+v, a request with the token is %+v", where, got.User, want)
	}
}

func expectRejected(t *testing.T, where string, got authenticationv1.TokenReviewStatus) {
	t.Helper()
	if got.Authenticated || got.User.Username != "" {
		t.Fatalf("%s: token authenticated as %+v, want rejected", where, got.User)
	}
}

// TestTokenReviewPerPlane: a plane's TokenReview authenticates a token
// exactly as a request to that plane would be: its own service-account
// tokens (TokenRequest, `kplane kubeconfig`) with the account's user info,
// other planes' tokens never; the server-wide admin token, valid for
// requests to every plane, in every plane.
func TestTokenReviewPerPlane(t *testing.T) {
	t.Parallel()
	s := shared
	a, b := uniquePlane(t, "tokenreview-a"), uniquePlane(t, "tokenreview-b")
	ctx := t.Context()
	adminA, adminB, root := s.Client(t, a), s.Client(t, b), s.Client(t, "root")

	sa, err := adminA.CoreV1().ServiceAccounts("default").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reviewed"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := adminA.CoreV1().ServiceAccounts("default").CreateToken(ctx, "reviewed", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saToken := tr.Status.Token
	// The plane's own cluster-admin (what a tenant holds) reviews in A.
	tenantToken := planeToken(t, s, a)
	tenantA := clientWithToken(t, s, a, tenantToken)

	want := whoAmI(t, a, saToken)
	if want.Username != "system:serviceaccount:default:reviewed" || want.UID != string(sa.UID) {
		t.Fatalf("a request with the token is %+v", want)
	}
	expectAuthenticatedAs(t, "service-account token in its plane's review (tenant)", review(t, tenantA, saToken), want)
	expectAuthenticatedAs(t, "service-account token in its plane's review (admin)", review(t, adminA, saToken), want)
	expectRejected(t, "plane A's service-account token in plane B", review(t, adminB, saToken))
	expectRejected(t, "plane A's service-account token in root", review(t, root, saToken))

	expectAuthenticatedAs(t, "kubeconfig token in its plane", review(t, tenantA, tenantToken), whoAmI(t, a, tenantToken))
	expectRejected(t, "plane A's kubeconfig token in plane B", review(t, adminB, tenantToken))
	expectRejected(t, "plane A's kubeconfig token in root", review(t, root, tenantToken))

	// A token for another audience is authenticated for that audience only,
	// as upstream reviews it.
	vault, err := adminA.CoreV1().ServiceAccounts("default").CreateToken(ctx, "reviewed",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := tenantA.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: vault.Status.Token, Audiences: []string{"vault"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expectAuthenticatedAs(t, "token for audience vault reviewed for vault", r.Status, want)
	if !slices.Equal(r.Status.Audiences, []string{"vault"}) {
		t.Fatalf("audiences of the review: %v, want [vault]", r.Status.Audiences)
	}
	expectRejected(t, "token for audience vault reviewed for the server", review(t, tenantA, vault.Status.Token))

	// The admin token authenticates requests to every plane; a review
	// answers the same.
	for plane, c := range map[string]kubernetes.Interface{a: tenantA, b: adminB, "root": root} {
		expectAuthenticatedAs(t, "admin token in "+plane, review(t, c, s.AdminToken()), whoAmI(t, plane, s.AdminToken()))
	}

	// A deleted service account's token stops authenticating, as for
	// requests.
	if err := adminA.CoreV1().ServiceAccounts("default").Delete(ctx, "reviewed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "token of a deleted service account rejected", func(context.Context) error {
		if review(t, tenantA, saToken).Authenticated {
			return errors.New("still authenticated")
		}
		return nil
	})
	expectRejected(t, "garbage token", review(t, tenantA, "not-a-token"))
}
