package apiserver

import (
	"context"
	"crypto"
	"fmt"

	"gopkg.in/go-jose/go-jose.v2/jwt"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"kplane.dev/kplane/planes"
)

// planeTokenGenerator signs service-account tokens with the plane of the
// request as part of the issuer (<external URL>/clusters/<id>/control-plane,
// the URL the plane is served at), so a token names the one plane it is
// valid in.
type planeTokenGenerator struct {
	externalURL string
	key         crypto.Signer
}

func newPlaneTokenGenerator(externalURL string, key crypto.Signer) serviceaccount.TokenGenerator {
	return &planeTokenGenerator{externalURL: externalURL, key: key}
}

// PlaneIssuer is the service-account token issuer of plane.
func PlaneIssuer(externalURL, plane string) string {
	return externalURL + planes.Path(plane)
}

func (g *planeTokenGenerator) GenerateToken(ctx context.Context, claims *jwt.Claims, privateClaims interface{}) (string, error) {
	plane, ok := planes.FromContext(ctx)
	if !ok {
		return "", fmt.Errorf("service-account token request without a plane refused")
	}
	generator, err := serviceaccount.JWTTokenGenerator(PlaneIssuer(g.externalURL, plane), g.key)
	if err != nil {
		return "", err
	}
	return generator.GenerateToken(ctx, claims, privateClaims)
}
