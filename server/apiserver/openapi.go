package apiserver

import (
	"net/http"
	"sync"

	restful "github.com/emicklei/go-restful/v3"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/apiserver/pkg/server/routes"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// openAPIDocuments are the server's OpenAPI documents. Upstream builds
// both at PrepareRun; kplane installs them itself (the server's
// SkipOpenAPIInstallation is set): v3 at once, as upstream, and v2 on its
// first request. The v2 document of every built-in group is the largest
// object of an idle server (about 20 MB of heap with the full profile,
// heap profile in ARCHITECTURE.md) and most clients read v3 only (kubectl
// since 1.27), so an idle server should not hold it.
type openAPIDocuments struct {
	v2        *openapicommon.Config
	container *restful.Container

	once    sync.Once
	handler http.Handler
	spec    *spec.Swagger
}

// installOpenAPI serves /openapi/v3 and a lazily built /openapi/v2 for
// everything installed on server so far: call it once every API group is.
func installOpenAPI(server *genericapiserver.GenericAPIServer, v2 *openapicommon.Config, v3 *openapicommon.OpenAPIV3Config) *openAPIDocuments {
	if v3 != nil {
		server.OpenAPIV3VersionedService = routes.OpenAPI{V3Config: v3}.InstallV3(server.Handler.GoRestfulContainer, server.Handler.NonGoRestfulMux)
	}
	docs := &openAPIDocuments{v2: v2, container: server.Handler.GoRestfulContainer}
	if v2 != nil {
		server.Handler.NonGoRestfulMux.Handle("/openapi/v2", docs)
	}
	return docs
}

// build makes the v2 document once, on a mux of its own: the server's
// mux has /openapi/v2 routed to d already.
func (d *openAPIDocuments) build() {
	d.once.Do(func() {
		m := mux.NewPathRecorderMux("openapi-v2")
		_, d.spec = routes.OpenAPI{Config: d.v2}.InstallV2(d.container, m)
		d.handler = m
	})
}

// ServeHTTP serves /openapi/v2, building the document on the first
// request (the request waits for it).
func (d *openAPIDocuments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.build()
	d.handler.ServeHTTP(w, r)
}

// V2 is the server's v2 document, built if it is not yet (nil without a
// v2 configuration).
func (d *openAPIDocuments) V2() *spec.Swagger {
	if d.v2 == nil {
		return nil
	}
	d.build()
	return d.spec
}
