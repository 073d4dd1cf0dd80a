package crds

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// Config configures per-plane CRD serving.
type Config struct {
	Handler HandlerConfig
	// Storages is the server's storage registry; it learns from this server
	// which CRD content each plane serves a custom resource with.
	Storages *planestorage.Registry
	// CRDStorage is the plane-scoped storage of the CRDs themselves.
	CRDStorage *planestorage.Store
	// CRDStatus updates a CRD's status in the plane of the context.
	CRDStatus rest.Updater
	// CRDs reads and updates CRDs (the finalizer) in the plane of the context.
	CRDs interface {
		rest.Getter
		rest.Updater
	}
	// BuiltinGroups are served by the server itself; a CRD can never shadow
	// them.
	BuiltinGroups sets.Set[string]
	// Serializer writes Status errors.
	Serializer runtime.NegotiatedSerializer
}

// Server serves every plane's CRDs.
type Server struct {
	config     Config
	index      *Index
	handlers   *handlers
	discovery  *discoveryCache
	openapi    *openapiCache
	controller *Controller
}

// New returns the CRD server; Filter installs it in the handler chain and
// Run follows the CRDs of every plane.
func New(config Config, notFound http.Handler) *Server {
	index := NewIndex()
	s := &Server{
		config:    config,
		index:     index,
		handlers:  newHandlers(config.Handler, notFound, config.BuiltinGroups),
		discovery: &discoveryCache{index: index, byPlane: map[string]*planeDiscovery{}},
	}
	s.openapi = newOpenAPICache(index)
	s.controller = newController(s)
	index.onChange = s.controller.enqueueGroupOf
	index.onUnused = func(hash string) {
		s.handlers.release(hash)
		s.openapi.forgetContent(hash)
	}
	if config.Storages != nil {
		config.Storages.SetContentResolver(index.content)
		index.templates = config.Storages.Chain
	}
	return s
}

// Run follows the CRDs of every plane (the index every server serves
// from) until ctx is done.
func (s *Server) Run(ctx context.Context) {
	planestorage.Follow(ctx, s.config.CRDStorage, s.index)
}

// RunConditions keeps every plane's CRD conditions and finalizers (upstream's
// naming, establishing and finalizing controllers) until ctx is done; one
// server of those sharing a datastore runs it at a time, and it can run
// again after it returned.
func (s *Server) RunConditions(ctx context.Context) { s.controller.run(ctx) }

// SetStaticOpenAPI gives the server's own OpenAPI v2 spec (known once the
// server runs); plane documents with CRDs are merged into it.
func (s *Server) SetStaticOpenAPI(f func() *spec.Swagger) { s.openapi.staticV2 = f }

// EnsureStorages builds the custom-resource storage of every CRD of plane,
// so that a plane being deleted can be wiped of its custom resources even
// if none was served since the server started.
func (s *Server) EnsureStorages(_ context.Context, plane string) error {
	entries, _ := s.index.List(plane)
	for _, e := range entries {
		if s.config.BuiltinGroups.Has(e.crd.Spec.Group) {
			// Never served, so nothing was stored through it.
			continue
		}
		if _, err := s.handlers.storage(e); err != nil {
			return err
		}
	}
	return nil
}

// HasSynced is closed once every stored CRD is known.
func (s *Server) HasSynced() <-chan struct{} { return s.index.HasSynced() }

// ForgetPlane drops everything kept for a deleted plane.
func (s *Server) ForgetPlane(plane string) {
	s.index.ForgetPlane(plane)
	s.discovery.forget(plane)
}

// Filter serves the custom resources, discovery and OpenAPI of the plane's
// CRDs and passes everything else to next. It runs inside the handler
// chain, after authentication and authorization.
func (s *Server) Filter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		plane, _ := planes.FromContext(ctx)
		info, ok := request.RequestInfoFrom(ctx)
		if !ok || plane == "" {
			next.ServeHTTP(w, req)
			return
		}
		if !info.IsResourceRequest {
			s.serveNonResource(w, req, next, plane)
			return
		}
		if info.APIPrefix != "apis" || s.config.BuiltinGroups.Has(info.APIGroup) {
			next.ServeHTTP(w, req)
			return
		}
		e, found := s.index.Get(plane, info.Resource+"."+info.APIGroup)
		if !found {
			next.ServeHTTP(w, req)
			return
		}
		s.serveResource(w, req, next, info, e)
	})
}

func (s *Server) serveResource(w http.ResponseWriter, req *http.Request, next http.Handler, info *request.RequestInfo, e *entry) {
	crd := e.crd
	gv := schema.GroupVersion{Group: info.APIGroup, Version: info.APIVersion}
	if !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) &&
		!apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
		next.ServeHTTP(w, req)
		return
	}
	if !apihelpers.HasServedCRDVersion(crd, info.APIVersion) {
		next.ServeHTTP(w, req)
		return
	}
	terminating := !crd.DeletionTimestamp.IsZero() || apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Terminating)
	if terminating && info.Verb == "create" {
		err := apierrors.NewMethodNotSupported(schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}, info.Verb)
		err.ErrStatus.Message = fmt.Sprintf("%v not allowed while custom resource definition is terminating", info.Verb)
		s.writeError(w, req, gv, err)
		return
	}
	if protobufBody(req) {
		s.writeError(w, req, gv, negotiation.NewUnsupportedMediaTypeError(customResourceBodyTypes))
		return
	}
	in, err := s.handlers.get(e)
	if err != nil {
		s.writeError(w, req, gv, apierrors.NewInternalError(err))
		return
	}
	in.handler.ServeHTTP(w, req)
}

// customResourceBodyTypes are the media types a custom resource can be
// written in.
var customResourceBodyTypes = []string{"application/json", "application/yaml"}

// protobufBody reports a create or update whose body is protobuf. Custom
// resources have no protobuf schema: upstream answers 415, and the shared
// handlers' decoder must never see such a body.
func protobufBody(req *http.Request) bool {
	if req.Method != http.MethodPost && req.Method != http.MethodPut {
		return false
	}
	mediaType, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	return err == nil && mediaType == runtime.ContentTypeProtobuf
}

func (s *Server) serveNonResource(w http.ResponseWriter, req *http.Request, next http.Handler, plane string) {
	path := strings.TrimSuffix(req.URL.Path, "/")
	if strings.HasPrefix(path, "/openapi/") {
		s.openapi.serve(w, req, next, plane)
		return
	}
	if !strings.HasPrefix(path, "/apis") || !s.index.HasAny(plane) {
		next.ServeHTTP(w, req)
		return
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	pd := s.discovery.forPlane(plane)
	switch {
	case len(parts) == 1 && parts[0] == "apis":
		s.discovery.serveAPIs(w, req, next, pd)
		return
	case len(parts) == 2 && !s.config.BuiltinGroups.Has(parts[1]):
		if g, ok := pd.group(parts[1]); ok {
			out := *g
			out.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
			writeJSON(w, "application/json", &out)
			return
		}
	case len(parts) == 3 && !s.config.BuiltinGroups.Has(parts[1]):
		if list, ok := pd.resources[schema.GroupVersion{Group: parts[1], Version: parts[2]}]; ok {
			out := *list
			out.TypeMeta = metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}
			writeJSON(w, "application/json", &out)
			return
		}
	}
	next.ServeHTTP(w, req)
}

func (s *Server) writeError(w http.ResponseWriter, req *http.Request, gv schema.GroupVersion, err error) {
	responsewriters.ErrorNegotiated(err, s.config.Serializer, gv, w, req)
}
