package apiserver

import (
	"bytes"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/server/mux"

	"kplane.dev/kplane/manifests"
	"kplane.dev/kplane/planes"
)

// Paths of kplane's own API contract (manifests/openapi/kplane.v1.yaml).
// They are public paths (auth.go): SDK generators and CI fetch them
// without a token.
const (
	contractYAMLPath = "/openapi/kplane.yaml"
	contractJSONPath = "/openapi/kplane.json"
)

// installContract serves the embedded contract. It describes the server,
// not a plane, so only the root plane's paths answer; the same path under
// a plane prefix is not found.
func installContract(m *mux.PathRecorderMux, serializer runtime.NegotiatedSerializer) error {
	asJSON, err := manifests.OpenAPIJSON()
	if err != nil {
		return err
	}
	m.Handle(contractYAMLPath, contractHandler(manifests.OpenAPIYAML(), "application/yaml", serializer))
	m.Handle(contractJSONPath, contractHandler(asJSON, "application/json", serializer))
	return nil
}

func contractHandler(doc []byte, contentType string, serializer runtime.NegotiatedSerializer) http.Handler {
	// The document only changes with the binary.
	loaded := time.Now()
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if plane, _ := planes.FromContext(req.Context()); plane != planes.Root {
			responsewriters.ErrorNegotiated(apierrors.NewNotFound(schema.GroupResource{}, req.URL.Path),
				serializer, schema.GroupVersion{Version: "v1"}, w, req)
			return
		}
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			responsewriters.ErrorNegotiated(apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "openapi"}, req.Method),
				serializer, schema.GroupVersion{Version: "v1"}, w, req)
			return
		}
		w.Header().Set("Content-Type", contentType)
		http.ServeContent(w, req, "", loaded, bytes.NewReader(doc))
	})
}
