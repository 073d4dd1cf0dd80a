package bootstrap

import (
	"context"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"

	"kplane.dev/kplane/planes"
)

// Ensurer brings a plane into being; *Bootstrapper is the implementation.
type Ensurer interface {
	Known(plane string) bool
	Ensure(ctx context.Context, plane string) error
}

// healthPaths never bootstrap a plane: probing a plane must not create it.
var healthPaths = []string{"/healthz", "/livez", "/readyz", "/version"}

// WithBootstrap runs innermost in the handler chain, after authentication
// and authorization, and bootstraps the request's plane before the request
// is served.
func WithBootstrap(handler http.Handler, b Ensurer, serializer runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		plane, ok := planes.FromContext(req.Context())
		if !ok || plane == planes.Root || b.Known(plane) || isHealthPath(req.URL.Path) {
			handler.ServeHTTP(w, req)
			return
		}
		if err := b.Ensure(req.Context(), plane); err != nil {
			if _, isStatus := err.(apierrors.APIStatus); !isStatus {
				err = apierrors.NewInternalError(err)
			}
			responsewriters.ErrorNegotiated(err, serializer, schema.GroupVersion{Version: "v1"}, w, req)
			return
		}
		handler.ServeHTTP(w, req)
	})
}

func isHealthPath(path string) bool {
	for _, p := range healthPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}
