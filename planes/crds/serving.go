package crds

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	listers "k8s.io/apiextensions-apiserver/pkg/client/listers/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/finalizer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// HandlerConfig is what every upstream CRD handler is built with.
type HandlerConfig struct {
	// Storage gives the plane-scoped custom-resource storage of one CRD
	// content: storages are shared only by planes with identical CRDs.
	Storage    func(content string) generic.RESTOptionsGetter
	Admission  admission.Interface
	Authorizer authorizer.Authorizer
	// ServiceResolver resolves the Services of conversion webhooks in one
	// plane.
	ServiceResolver     func(plane string) webhook.ServiceResolver
	AuthResolverWrapper webhook.AuthenticationInfoResolverWrapper
	RequestTimeout      time.Duration
	MinRequestTimeout   time.Duration
	StaticOpenAPISpec   map[string]*spec.Schema
	MaxRequestBodyBytes int64
}

// handlers keeps one upstream CRD handler per CRD content hash.
type handlers struct {
	config   HandlerConfig
	notFound http.Handler
	builtin  sets.Set[string]

	mu     sync.Mutex
	byHash map[string]*instance
}

// instance is an upstream CRD handler that sees exactly one CRD: the
// representative of a content hash.
type instance struct {
	handler http.Handler
	source  *crdSource
}

// customResourceStorage is the upstream handler's access to a CRD's
// storage, for the finalizer.
type customResourceStorage interface {
	GetCustomResourceListerCollectionDeleter(crd *apiextensionsv1.CustomResourceDefinition) (finalizer.ListerCollectionDeleter, error)
}

func newHandlers(config HandlerConfig, notFound http.Handler, builtin sets.Set[string]) *handlers {
	return &handlers{config: config, notFound: notFound, builtin: builtin, byHash: map[string]*instance{}}
}

// representative is the CRD the shared handler of e's content sees: the
// spec of e, served, with a UID derived from the content so that every
// plane maps to the same serving info.
func representative(e *entry) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = e.crd.Name
	crd.UID = types.UID(e.hash)
	crd.Spec = *e.crd.Spec.DeepCopy()
	crd.Status.AcceptedNames = e.crd.Spec.Names
	crd.Status.StoredVersions = e.crd.Status.StoredVersions
	crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{
		{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue},
		{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue},
	}
	return crd
}

// get returns the handler of e's content, building it on first use.
func (h *handlers) get(e *entry) (*instance, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if in, ok := h.byHash[e.hash]; ok {
		return in, nil
	}
	if h.builtin.Has(e.crd.Spec.Group) {
		// Refused at admission; one stored before that is never served.
		return nil, fmt.Errorf("%s: group %q is served by the built-in API", e.crd.Name, e.crd.Spec.Group)
	}
	source := &crdSource{crd: representative(e)}
	handler, err := apiextensionsapiserver.NewCustomResourceDefinitionHandler(
		nil, nil, // discovery is served per plane by this package
		source,
		h.notFound,
		h.config.Storage(e.hash),
		h.config.Admission,
		nil, // establishing is decided per plane by the Controller
		h.serviceResolver(e),
		h.config.AuthResolverWrapper,
		1,
		h.config.Authorizer,
		h.config.RequestTimeout,
		h.config.MinRequestTimeout,
		h.config.StaticOpenAPISpec,
		h.config.MaxRequestBodyBytes,
	)
	if err != nil {
		return nil, fmt.Errorf("building handler for %s: %w", e.crd.Name, err)
	}
	in := &instance{handler: handler, source: source}
	h.byHash[e.hash] = in
	return in, nil
}

// serviceResolver is what e's handler resolves conversion webhook
// Services with: a CRD that names one has a handler of its own plane
// (its content hash carries the plane), so the plane's resolver; other
// handlers are shared by planes and resolve nothing.
func (h *handlers) serviceResolver(e *entry) webhook.ServiceResolver {
	if conversionByService(e.crd) {
		return h.config.ServiceResolver(e.plane)
	}
	return noServiceResolver{}
}

// noServiceResolver is the resolver of handlers shared by planes: their
// CRDs convert by URL, if at all.
type noServiceResolver struct{}

func (noServiceResolver) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	return nil, fmt.Errorf("service %s/%s: a CRD handler shared by planes resolves no Service", namespace, name)
}

// conversionByService tells whether crd converts through a webhook named
// by a Service reference.
func conversionByService(crd *apiextensionsv1.CustomResourceDefinition) bool {
	c := crd.Spec.Conversion
	return c != nil && c.Strategy == apiextensionsv1.WebhookConverter &&
		c.Webhook != nil && c.Webhook.ClientConfig != nil && c.Webhook.ClientConfig.Service != nil
}

// release tears down the handler of a content hash no CRD uses anymore:
// its CRD disappears from its lister, and the upstream handler destroys
// the storage it built for it.
func (h *handlers) release(hash string) {
	h.mu.Lock()
	in, ok := h.byHash[hash]
	delete(h.byHash, hash)
	h.mu.Unlock()
	if ok {
		in.source.remove()
	}
}

// storage returns the custom-resource storage of e's CRD.
func (h *handlers) storage(e *entry) (finalizer.ListerCollectionDeleter, error) {
	in, err := h.get(e)
	if err != nil {
		return nil, err
	}
	crs, ok := in.handler.(customResourceStorage)
	if !ok {
		return nil, fmt.Errorf("CRD handler exposes no storage")
	}
	return crs.GetCustomResourceListerCollectionDeleter(in.source.crd)
}

// crdSource is the informer and lister of an upstream handler that must see
// one CRD only. The handler registers event handlers at construction; the
// one event it gets is the CRD's removal.
type crdSource struct {
	cache.SharedIndexInformer // only AddEventHandler is used

	mu       sync.Mutex
	crd      *apiextensionsv1.CustomResourceDefinition
	handlers []cache.ResourceEventHandler
}

var _ listers.CustomResourceDefinitionLister = &crdSource{}

func (s *crdSource) Informer() cache.SharedIndexInformer { return s }

func (s *crdSource) Lister() listers.CustomResourceDefinitionLister { return s }

func (s *crdSource) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlers = append(s.handlers, h)
	return nil, nil
}

func (s *crdSource) List(labels.Selector) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crd == nil {
		return nil, nil
	}
	return []*apiextensionsv1.CustomResourceDefinition{s.crd}, nil
}

func (s *crdSource) Get(name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crd == nil || s.crd.Name != name {
		return nil, apierrors.NewNotFound(apiextensionsv1.Resource("customresourcedefinitions"), name)
	}
	return s.crd, nil
}

func (s *crdSource) remove() {
	s.mu.Lock()
	crd := s.crd
	s.crd = nil
	hs := append([]cache.ResourceEventHandler(nil), s.handlers...)
	s.mu.Unlock()
	for _, h := range hs {
		h.OnDelete(crd)
	}
}
