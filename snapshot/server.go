package snapshot

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
	"weak"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/crds"
	planestorage "kplane.dev/kplane/planes/storage"
)

// CustomResources are the plane's CRDs (planes/crds).
type CustomResources interface {
	// CustomResources are the established custom resources plane serves.
	CustomResources(plane string) []crds.CustomResource
	// EnsureStorages builds the storage (and watch cache) of every CRD of
	// plane that has none yet.
	EnsureStorages(ctx context.Context, plane string) error
}

// Config is what the snapshot server reads from.
type Config struct {
	// Storage holds every resource's plane-scoped storage and watch cache.
	Storage *planestorage.Registry
	// Authorizer is the server's authorizer; it decides, in the plane of
	// the request, which resources the caller may list or watch.
	Authorizer authorizer.Authorizer
	// CustomResources are the planes' CRDs (nil: built-in resources only).
	CustomResources CustomResources
	// Discovery serve the server's aggregated discovery documents of its
	// built-in resources: the core group first, then the named groups.
	Discovery []http.Handler
	// Schemes convert built-in objects from their internal version.
	Schemes []*runtime.Scheme
	// Serializer writes Status errors.
	Serializer runtime.NegotiatedSerializer
	// EncodingCacheBytes bounds the memory kept for encoded objects
	// (default 256 MiB; negative: keep none).
	EncodingCacheBytes int64
	// WarmTimeout bounds how long a request waits for caches to sync
	// (default 30s).
	WarmTimeout time.Duration
	// Streams bound the delta streams.
	Streams StreamLimits
}

// Server serves snapshots and delta streams.
type Server struct {
	config Config

	mu      sync.Mutex
	builtin []*target

	// initial are the storages built before the server: their caches
	// started with the process, before any snapshot was taken. A cache
	// built later (a custom resource's) can serve no watch from before it
	// was built; floors holds, for each, a revision it can serve watches
	// from: the first one a snapshot read from it. Storages are held
	// weakly: a custom resource's storage that is released must not be
	// kept alive, watch cache and all, by this bookkeeping.
	initial map[weak.Pointer[planestorage.Store]]bool
	// encodings keeps what snapshots wrote, to write it again.
	encodings *encodings
	floorMu   sync.Mutex
	floors    map[weak.Pointer[planestorage.Store]]uint64

	// taps feed the delta streams; streams counts them.
	taps    *taps
	streams *streamCounter
}

// New returns a snapshot server.
func New(config Config) *Server {
	if config.WarmTimeout == 0 {
		config.WarmTimeout = 30 * time.Second
	}
	if config.EncodingCacheBytes == 0 {
		config.EncodingCacheBytes = 256 << 20
	}
	s := &Server{
		config: config, initial: map[weak.Pointer[planestorage.Store]]bool{}, floors: map[weak.Pointer[planestorage.Store]]uint64{},
		taps: newTaps(defaultTapSettings()), streams: newStreamCounter(config.Streams),
	}
	if config.EncodingCacheBytes > 0 {
		s.encodings = newEncodings(config.EncodingCacheBytes, 2*time.Minute)
	}
	if config.Storage != nil {
		for _, store := range config.Storage.Stores() {
			s.initial[weak.Make(store)] = true
		}
	}
	return s
}

// floor returns the revision a watch of store can start from at the
// earliest (0: any revision a snapshot reports), recording rv, read from
// store now, if it knew none.
func (s *Server) floor(store *planestorage.Store, rv uint64) uint64 {
	key := weak.Make(store)
	if s.initial[key] {
		return 0
	}
	s.floorMu.Lock()
	defer s.floorMu.Unlock()
	f, ok := s.floors[key]
	if !ok {
		s.floors[key] = rv
		f = rv
		// Forget the storages released since.
		for k := range s.floors {
			if k.Value() == nil {
				delete(s.floors, k)
			}
		}
	}
	return f
}

// target is one resource of a plane with what reads and writes it.
type target struct {
	*resourceInfo
	// store is nil for a custom resource whose storage is not built yet.
	store *planestorage.Store
	enc   encoder
}

// Filter serves GET /snapshot and passes every other request to next. It
// belongs inside the handler chain, after authentication, authorization of
// the request itself and the plane lifecycle filter.
func (s *Server) Filter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != Path {
			next.ServeHTTP(w, req)
			return
		}
		s.ServeHTTP(w, req)
	})
}

// ServeHTTP serves a snapshot request.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	plane, ok := planes.FromContext(ctx)
	if !ok {
		s.writeError(w, req, apierrors.NewInternalError(fmt.Errorf("snapshot request without a plane")))
		return
	}
	if req.Method != http.MethodGet {
		s.writeError(w, req, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "snapshot"}, req.Method))
		return
	}
	u, ok := request.UserFrom(ctx)
	if !ok {
		s.writeError(w, req, apierrors.NewUnauthorized("no user"))
		return
	}
	opts, err := ParseOptions(req.URL.Query())
	if err != nil {
		s.writeError(w, req, apierrors.NewBadRequest(err.Error()))
		return
	}
	verb := "list"
	if opts.Watch {
		verb = "watch"
	}
	targets, err := s.selectTargets(ctx, plane, u, verb, opts)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	if opts.Watch {
		// A stream is a watch for the handler chain (no request timeout,
		// no max-in-flight seat): these limits are its only bound.
		release, err := s.streams.acquire(plane, u.GetName())
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		defer release()
		s.serveStream(w, req, plane, targets, opts)
		return
	}
	s.serveSnapshot(w, req, plane, targets, opts)
}

func (s *Server) writeError(w http.ResponseWriter, req *http.Request, err error) {
	if _, ok := err.(apierrors.APIStatus); !ok {
		err = apierrors.NewInternalError(err)
	}
	responsewriters.ErrorNegotiated(err, s.config.Serializer, schema.GroupVersion{Version: "v1"}, w, req)
}

// selectTargets returns the resources of plane the request covers: resource=
// names resolved, namespace= applied, and only what u may verb. A resource
// named by resource= that u may not verb fails the request (403), and so
// does a request left with no resource at all.
func (s *Server) selectTargets(ctx context.Context, plane string, u user.Info, verb string, opts Options) ([]*target, error) {
	all, err := s.targets(plane)
	if err != nil {
		return nil, err
	}
	infos := make([]*resourceInfo, len(all))
	for i, t := range all {
		infos[i] = t.resourceInfo
	}
	picked, err := resolve(infos, opts.Resources)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	byInfo := make(map[*resourceInfo]*target, len(all))
	for _, t := range all {
		byInfo[t.resourceInfo] = t
	}
	explicit := len(opts.Resources) > 0
	// One who may verb every resource (a plane's cluster-admin) is asked
	// once rather than once per resource: no authorizer of the server
	// denies what a wildcard allows, and each question reads the plane's
	// role bindings.
	everything := s.allowsEverything(ctx, u, verb, opts.Namespace)
	var out []*target
	var firstDenied *authorizer.AttributesRecord
	var deniedReason string
	for _, info := range picked {
		if opts.Namespace != "" && !info.namespaced {
			if explicit {
				return nil, apierrors.NewBadRequest(fmt.Sprintf(
					"%s is cluster-scoped: namespace=%s selects namespaced resources only", info.name(), opts.Namespace))
			}
			continue
		}
		if everything {
			out = append(out, byInfo[info])
			continue
		}
		attrs := &authorizer.AttributesRecord{
			User: u, Verb: verb, Namespace: opts.Namespace,
			APIGroup: info.gvr.Group, APIVersion: info.gvr.Version, Resource: info.gvr.Resource,
			ResourceRequest: true,
		}
		decision, reason, err := s.config.Authorizer.Authorize(ctx, attrs)
		if err != nil && decision != authorizer.DecisionAllow {
			reason = err.Error()
		}
		if decision != authorizer.DecisionAllow {
			if explicit {
				return nil, responsewriters.ForbiddenStatusError(attrs, reason)
			}
			if firstDenied == nil {
				firstDenied, deniedReason = attrs, reason
			}
			continue
		}
		out = append(out, byInfo[info])
	}
	if len(out) == 0 {
		if firstDenied == nil {
			return nil, apierrors.NewBadRequest("no resource selected")
		}
		scope := "at the cluster scope"
		if opts.Namespace != "" {
			scope = "in the namespace " + fmt.Sprintf("%q", opts.Namespace)
		}
		msg := fmt.Sprintf("User %q cannot %s any resource of plane %q %s", u.GetName(), verb, plane, scope)
		if deniedReason != "" {
			msg += ": " + deniedReason
		}
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "snapshot"}, "", fmt.Errorf("%s", msg))
	}
	return out, nil
}

// allowsEverything reports whether u may verb every resource of every
// group (in namespace, if given).
func (s *Server) allowsEverything(ctx context.Context, u user.Info, verb, namespace string) bool {
	decision, _, _ := s.config.Authorizer.Authorize(ctx, &authorizer.AttributesRecord{
		User: u, Verb: verb, Namespace: namespace, APIGroup: "*", APIVersion: "*", Resource: "*", ResourceRequest: true,
	})
	return decision == authorizer.DecisionAllow
}

// targets are every resource plane serves: the built-in ones, then the
// plane's custom resources.
func (s *Server) targets(plane string) ([]*target, error) {
	builtin, err := s.builtinTargets()
	if err != nil {
		return nil, err
	}
	if s.config.CustomResources == nil {
		return builtin, nil
	}
	custom := customResources(s.config.CustomResources.CustomResources(plane))
	if len(custom) == 0 {
		return builtin, nil
	}
	out := make([]*target, 0, len(builtin)+len(custom))
	out = append(out, builtin...)
	for _, info := range custom {
		out = append(out, &target{
			resourceInfo: info,
			store:        s.config.Storage.StorageFor(plane, info.gvr.GroupResource()),
			enc:          encoder{gv: info.gvr.GroupVersion()},
		})
	}
	return out, nil
}

// builtinTargets are the built-in resources served from storage, found
// once: they never change while the server runs. Two resources stored at
// the same place (core and events.k8s.io events) are one resource here,
// named as the first one in discovery order.
func (s *Server) builtinTargets() ([]*target, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.builtin != nil {
		return s.builtin, nil
	}
	infos, err := builtinResources(s.config.Discovery)
	if err != nil {
		return nil, err
	}
	prefixes := map[string]bool{}
	var out []*target
	for _, info := range infos {
		store := s.config.Storage.Storage(info.gvr.GroupResource())
		if store == nil || prefixes[store.ResourcePrefix()] {
			continue
		}
		scheme := s.schemeFor(info.gvr.GroupVersion())
		if scheme == nil {
			continue
		}
		prefixes[store.ResourcePrefix()] = true
		out = append(out, &target{resourceInfo: info, store: store, enc: encoder{gv: info.gvr.GroupVersion(), scheme: scheme}})
	}
	s.builtin = out
	return out, nil
}

func (s *Server) schemeFor(gv schema.GroupVersion) *runtime.Scheme {
	for _, scheme := range s.config.Schemes {
		if scheme.IsVersionRegistered(gv) {
			return scheme
		}
	}
	return nil
}

// warm builds the storage of every custom resource among targets that has
// none and waits, up to the warm timeout, until every target's cache is
// synced.
func (s *Server) warm(ctx context.Context, plane string, targets []*target) {
	ctx, cancel := context.WithTimeout(ctx, s.config.WarmTimeout)
	defer cancel()
	missing := false
	for _, t := range targets {
		missing = missing || t.store == nil
	}
	if missing && s.config.CustomResources != nil {
		if err := s.config.CustomResources.EnsureStorages(ctx, plane); err == nil {
			for _, t := range targets {
				if t.store == nil {
					t.store = s.config.Storage.StorageFor(plane, t.gvr.GroupResource())
				}
			}
		}
	}
	delay := 5 * time.Millisecond
	for {
		ready := true
		for _, t := range targets {
			ready = ready && synced(t.store)
		}
		if ready {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		if delay < 200*time.Millisecond {
			delay *= 2
		}
	}
}

// synced reports whether a storage's watch cache holds the resource's
// state. A storage without a cache never counts as synced: reading it
// would read the datastore.
func synced(store *planestorage.Store) bool {
	return store != nil && store.Cached() && store.ReadinessCheck() == nil
}
