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
// SkipOpenAPIInstallation is set). The v2 document of every built-in group
// is the largest object of an idle server (about 20 MB of heap with the
// full profile, heap profile in ARCHITECTURE.md) and most clients read v3
// only (kubectl since 1.27), so an idle server should not hold it: v2 is
// built on its first request. v3 is built on its first request too: it
// takes about 0.2 s of CPU, which kept every start from being ready that
// much longer (restart to ready 1.00 -> 0.86 s, median of five), and
// built in the background at start it only moved that CPU into the
// post-start hooks. That first request waits for it, once per process.
type openAPIDocuments struct {
	v2        *openapicommon.Config
	v3        *openapicommon.OpenAPIV3Config
	container *restful.Container

	once    sync.Once
	handler http.Handler
	spec    *spec.Swagger

	v3Once    sync.Once
	v3Handler http.Handler
}

// installOpenAPI serves lazily built /openapi/v3 and /openapi/v2 documents
// of everything installed on server so far: call it once every API group
// is.
func installOpenAPI(server *genericapiserver.GenericAPIServer, v2 *openapicommon.Config, v3 *openapicommon.OpenAPIV3Config) *openAPIDocuments {
	docs := &openAPIDocuments{v2: v2, v3: v3, container: server.Handler.GoRestfulContainer}
	if v3 != nil {
		serveV3 := http.HandlerFunc(docs.serveV3)
		server.Handler.NonGoRestfulMux.Handle("/openapi/v3", serveV3)
		server.Handler.NonGoRestfulMux.HandlePrefix("/openapi/v3/", serveV3)
	}
	if v2 != nil {
		server.Handler.NonGoRestfulMux.Handle("/openapi/v2", docs)
	}
	return docs
}

// serveV3 serves /openapi/v3, building the documents on the first request
// (the requests meanwhile wait for it) on a mux of their own, as
// upstream's PrepareRun would: the server's mux has /openapi/v3 routed
// here already. The builder sets defaults on the configuration it is
// given: it gets a copy, which nothing else reads while it runs.
func (d *openAPIDocuments) serveV3(w http.ResponseWriter, r *http.Request) {
	d.v3Once.Do(func() {
		own := *d.v3
		m := mux.NewPathRecorderMux("openapi-v3")
		routes.OpenAPI{V3Config: &own}.InstallV3(d.container, m)
		d.v3Handler = m
	})
	d.v3Handler.ServeHTTP(w, r)
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
