package routing

import (
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"

	"kplane.dev/kplane/planes"
)

const (
	clustersSegment     = "clusters"
	controlPlaneSegment = "control-plane"
	// Prefix starts every path of a plane other than root.
	Prefix = "/" + clustersSegment + "/"
)

// planeScopedPaths are the non-resource paths a plane other than root serves.
// Everything else outside /api and /apis (metrics, debug, logs, flags) is
// server-wide and belongs to the root plane only, so it never leaks
// cross-plane information through a tenant's URL.
var planeScopedPaths = []string{
	"/api", "/apis", "/healthz", "/livez", "/readyz", "/version",
	"/openapi/v2", "/openapi/v3", "/snapshot", "/reset", "/audit",
	"/.well-known/openid-configuration", "/openid/v1/jwks",
}

// WithRouting wraps handler with the plane router. serializer is used to
// write Status errors.
func WithRouting(handler http.Handler, serializer runtime.NegotiatedSerializer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id, rest, err := Parse(req.URL.Path, req.URL.EscapedPath())
		if err != nil {
			responsewriters.ErrorNegotiated(err, serializer, schema.GroupVersion{Version: "v1"}, w, req)
			return
		}
		if id != planes.Root && !isPlaneScoped(rest) {
			responsewriters.ErrorNegotiated(
				pathNotFound(rest, fmt.Sprintf("plane %s serves only %s", id, strings.Join(planeScopedPaths, ", "))),
				serializer, schema.GroupVersion{Version: "v1"}, w, req)
			return
		}
		if id != planes.Root {
			req = rewrite(req, rest)
		}
		handler.ServeHTTP(w, req.WithContext(planes.WithPlane(req.Context(), id)))
	})
}

// Parse splits a request path into the plane id and the path inside the
// plane. path is the decoded path, escaped the path as sent; both are needed
// because an encoded slash or dot must never change which plane a request
// reaches. The returned error is a Kubernetes API error (400 or 404).
func Parse(path, escaped string) (id, rest string, err error) {
	if err := checkSegments(path, escaped); err != nil {
		return "", "", err
	}
	if path != "/"+clustersSegment && !strings.HasPrefix(path, Prefix) {
		return planes.Root, path, nil
	}
	// Work on the escaped form so that %2F inside the id stays inside the id
	// (and fails validation) instead of becoming a separator.
	segments := strings.SplitN(strings.TrimPrefix(escaped, "/"), "/", 4)
	// segments: "clusters", <id>, "control-plane", <rest>
	if len(segments) < 2 || segments[1] == "" {
		return "", "", pathNotFound(path, planePathForm)
	}
	id = segments[1]
	if verr := planes.ValidateID(id); verr != nil {
		return "", "", apierrors.NewBadRequest(verr.Error())
	}
	if len(segments) < 3 || segments[2] != controlPlaneSegment {
		return "", "", pathNotFound(path, planePathForm)
	}
	// The id holds no escapes, so the decoded path starts with the same
	// prefix; the decoded rest is what the inner handlers route on.
	rest = strings.TrimPrefix(path, planes.Path(id))
	if rest == "" {
		rest = "/"
	}
	if !strings.HasPrefix(rest, "/") {
		return "", "", pathNotFound(path, planePathForm)
	}
	return id, rest, nil
}

// planePathForm says how a plane's paths are made.
const planePathForm = "a plane's paths are " + Prefix + "<id>/" + controlPlaneSegment + "/..."

// pathNotFound is the 404 of a path nothing serves, a Status as every
// error of the router is, with a message that says why (upstream's
// NotFound of a resource would read ` "<path>" not found`).
func pathNotFound(path, why string) *apierrors.StatusError {
	err := apierrors.NewNotFound(schema.GroupResource{}, path)
	err.ErrStatus.Message = fmt.Sprintf("the server could not find the requested path %q: %s", path, why)
	return err
}

// checkSegments rejects empty, "." and ".." segments anywhere in the path,
// decoded or not: none of them is meaningful in a Kubernetes API path and
// each is a way to make a path look like it belongs to another plane.
func checkSegments(path, escaped string) error {
	for _, p := range []string{path, escaped} {
		if !strings.HasPrefix(p, "/") {
			return apierrors.NewBadRequest(fmt.Sprintf("invalid request path %q", path))
		}
		trimmed := strings.TrimSuffix(p[1:], "/")
		if trimmed == "" {
			continue
		}
		for _, seg := range strings.Split(trimmed, "/") {
			switch strings.ToLower(seg) {
			case "", ".", "..", "%2e", "%2e%2e", ".%2e", "%2e.":
				return apierrors.NewBadRequest(fmt.Sprintf("invalid request path %q: empty or dot segment", path))
			}
		}
	}
	return nil
}

func isPlaneScoped(rest string) bool {
	for _, p := range planeScopedPaths {
		if rest == p || strings.HasPrefix(rest, p+"/") {
			return true
		}
	}
	return false
}

func rewrite(req *http.Request, rest string) *http.Request {
	r := req.Clone(req.Context())
	r.URL.Path = rest
	r.URL.RawPath = ""
	r.RequestURI = r.URL.RequestURI()
	return r
}
