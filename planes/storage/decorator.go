package storage

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"

	"kplane.dev/kplane/planes"
)

// PlaneField is the selectable field every plane-scoped object carries in
// the watch cache. It is the cacher's trigger index: an event is dispatched
// only to watchers whose predicate requires the event's plane.
const PlaneField = "metadata.kplane.plane"

// Registry holds every plane-scoped storage of the server. Registries built
// more than once for the same resource (per-plane service registries, the
// custom-resource registries of identical CRDs in many planes) get the one
// storage and watch cache already built instead of another watch on the
// datastore.
//
// Built-in and custom-resource storages are kept in separate maps: a lookup
// of a built-in group/resource can never return a custom-resource storage,
// whatever CRDs a plane holds. A custom-resource storage is shared only by
// planes whose CRD has the same content (the whole spec: scope, versions,
// schemas, conversion), because all of it decides how stored objects are
// keyed, decoded, pruned and defaulted.
type Registry struct {
	mu         sync.Mutex
	builtin    map[string]*sharedStorage
	custom     map[string]*sharedStorage
	transforms map[schema.GroupResource]Transform
	uncached   map[schema.GroupResource]bool
	// buildsCaches: the registry builds every watch cache itself
	// (CacheEveryResource).
	buildsCaches bool
	onNew        []func(*Store)
	// contentOf names the CRD content a plane serves a custom resource
	// with; set once by the CRD server.
	contentOf atomic.Pointer[ContentResolver]
	// layers says which planes are made from templates; set once by the
	// lifecycle.
	layers atomic.Pointer[Layers]
	// guard holds planes to their limits; set once by the server.
	guard atomic.Pointer[WriteGuard]
	// createHooks complete the objects of a resource planes create.
	createHooks atomic.Pointer[map[schema.GroupResource]CreateHook]
	// counts say which planes hold records of a resource; set once by the
	// server.
	counts atomic.Pointer[Counts]
	// written is where tracked planes have records of their own.
	written writtenResources
	// datastore connects the storages the registry builds.
	datastore *datastoreClients
	// sole: no other server writes the datastore (freshreads.go).
	sole atomic.Bool
}

// ContentResolver returns the content key of plane's CRD for a custom
// resource, or false when the plane has no such CRD.
type ContentResolver func(plane string, resource schema.GroupResource) (string, bool)

// SetContentResolver tells the registry which CRD content each plane
// serves its custom resources with.
func (r *Registry) SetContentResolver(f ContentResolver) { r.contentOf.Store(&f) }

func (r *Registry) resolveContent(plane string, resource schema.GroupResource) (string, bool) {
	f := r.contentOf.Load()
	if f == nil {
		return "", false
	}
	return (*f)(plane, resource)
}

// servesWith reports whether plane serves resource with the CRD content
// (every plane serves a built-in resource, content "").
func (r *Registry) servesWith(plane string, resource schema.GroupResource, content string) bool {
	if content == "" {
		return true
	}
	owner, ok := r.resolveContent(plane, resource)
	return ok && owner == content
}

// OnNewStore calls f with every storage built so far and every storage
// built from now on (custom resources appear while the server runs).
func (r *Registry) OnNewStore(f func(*Store)) {
	r.mu.Lock()
	r.onNew = append(r.onNew, f)
	existing := r.storesLocked(false)
	r.mu.Unlock()
	for _, s := range existing {
		f(s)
	}
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{builtin: map[string]*sharedStorage{}, custom: map[string]*sharedStorage{},
		transforms: map[schema.GroupResource]Transform{}, uncached: map[schema.GroupResource]bool{},
		datastore: newDatastoreClients()}
}

// UseInProcessDatastore makes the storages of the datastore at endpoints
// use clients from newClient, which reach it in this process without a
// connection. Call it before the registry builds storages.
func (r *Registry) UseInProcessDatastore(endpoints []string, newClient func() *clientv3.Client) {
	r.datastore.useLocal(endpoints, newClient)
}

// SetCacheTransform makes the watch cache of resource keep objects through
// transform. Call it before the resource's registry is built.
func (r *Registry) SetCacheTransform(resource schema.GroupResource, transform Transform) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.transforms[resource] = transform
}

// CacheEveryResource makes the registry build the watch cache of every
// resource the server would cache, as upstream builds it, keeping the
// datastore behind each cache for the watches the cache's history no
// longer reaches (watchShared). Call it before any registry is built.
func (r *Registry) CacheEveryResource() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buildsCaches = true
}

// SetUncached makes the storage of resource read and watch the datastore
// itself, with no watch cache: for records that are read only to be
// written (a cache would hold every plane's copy in memory for nothing).
// Call it before the resource's registry is built.
func (r *Registry) SetUncached(resource schema.GroupResource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.uncached[resource] = true
}

// RESTOptionsGetter hands out plane-scoped storage for every resource.
type RESTOptionsGetter struct {
	delegate generic.RESTOptionsGetter
	registry *Registry
	// content is the CRD content key of a custom-resource getter, empty
	// for built-in resources.
	content string
}

type sharedStorage struct {
	store   *Store
	destroy factory.DestroyFunc
	refs    int
	// family: the storages of one CRD content's served versions share it.
	family string
}

// hasFamilyLocked reports whether a storage of family (not empty) that is
// not a mirror exists.
func hasFamilyLocked(m map[string]*sharedStorage, family string) bool {
	if family == "" {
		return false
	}
	for _, s := range m {
		if s.family == family && !s.store.mirror {
			return true
		}
	}
	return false
}

// servedGroupVersion is the group version the objects newFunc makes are
// of.
func servedGroupVersion(newFunc func() runtime.Object) schema.GroupVersion {
	return newFunc().GetObjectKind().GroupVersionKind().GroupVersion()
}

// Wrap returns a getter that hands out delegate's storage (normally the
// upstream StorageFactoryRestOptionsFactory), plane-scoped and registered
// here.
func (r *Registry) Wrap(delegate generic.RESTOptionsGetter) *RESTOptionsGetter {
	return &RESTOptionsGetter{delegate: delegate, registry: r}
}

// WrapCustom is Wrap for the custom resources of one CRD content: the
// storages it hands out are shared only with registries of the same
// content.
func (r *Registry) WrapCustom(delegate generic.RESTOptionsGetter, content string) *RESTOptionsGetter {
	return &RESTOptionsGetter{delegate: delegate, registry: r, content: content}
}

// GetRESTOptions implements generic.RESTOptionsGetter.
func (g *RESTOptionsGetter) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.delegate.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	opts.Decorator = g.registry.decorate(resource, g.content, opts.Decorator)
	return opts, nil
}

// Storage returns the storage already built for a built-in resource, or
// nil when no registry for it exists yet. It never returns a
// custom-resource storage: use StorageFor for those.
func (r *Registry) Storage(resource schema.GroupResource) *Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	return findLocked(r.builtin, resource, "")
}

// StorageFor returns the storage that serves resource in plane: the
// built-in one, or the custom-resource storage of the plane's CRD content;
// nil when there is none (yet).
func (r *Registry) StorageFor(plane string, resource schema.GroupResource) *Store {
	if s := r.Storage(resource); s != nil {
		return s
	}
	content, ok := r.resolveContent(plane, resource)
	if !ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return findLocked(r.custom, resource, content)
}

func findLocked(m map[string]*sharedStorage, resource schema.GroupResource, content string) *Store {
	for _, s := range m {
		if s.store.resource == resource && s.store.content == content && !s.store.mirror {
			return s.store
		}
	}
	return nil
}

// Stores returns every storage built so far, one per resource and CRD
// content: what followers, counters, wipes, clones and snapshots go
// through. The other served versions of a CRD have storages of their own
// (Caches) that serve their version's requests only.
func (r *Registry) Stores() []*Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.storesLocked(false)
}

// Caches returns every storage built so far, the other served versions of
// CRDs included: every watch cache there is.
func (r *Registry) Caches() []*Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.storesLocked(true)
}

func (r *Registry) storesLocked(mirrors bool) []*Store {
	stores := make([]*Store, 0, len(r.builtin)+len(r.custom))
	for _, m := range []map[string]*sharedStorage{r.builtin, r.custom} {
		for _, s := range m {
			if mirrors || !s.store.mirror {
				stores = append(stores, s.store)
			}
		}
	}
	return stores
}

// memoKey identifies a storage: its key space and how it encodes. Two
// custom-resource registries for the same group/resource with different
// storage versions must not share an encoder.
func memoKey(config *storagebackend.ConfigForResource, resourcePrefix string) string {
	if config == nil || config.EncodeVersioner == nil {
		return resourcePrefix
	}
	return resourcePrefix + "|" + fmt.Sprint(config.EncodeVersioner)
}

func (r *Registry) decorate(resource schema.GroupResource, content string, inner generic.StorageDecorator) generic.StorageDecorator {
	return func(
		config *storagebackend.ConfigForResource,
		resourcePrefix string,
		cacheKeyFunc func(obj runtime.Object) (string, error),
		newFunc func() runtime.Object,
		newListFunc func() runtime.Object,
		getAttrsFunc storage.AttrFunc,
		_ storage.IndexerFuncs,
		indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		shared, key := r.builtin, memoKey(config, resourcePrefix)
		var family string
		if content != "" {
			// One storage per served version, as upstream: each decodes,
			// converts, prunes and defaults the stored objects into its
			// own version. The first of a content's versions is the one
			// the rest of kplane follows; the others are its mirrors.
			version := servedGroupVersion(newFunc)
			family = key + "|" + content
			shared, key = r.custom, family+"|"+version.Version
			// One prefix holds every plane's objects, whatever their CRD:
			// this storage's cache sees objects of planes whose CRD differs
			// (scope, versions). Their keys must not collide and an object
			// it cannot decode must not end its watch; such objects are
			// never served from it (Owns, StorageFor).
			cacheKeyFunc = objectKeyFunc(resourcePrefix)
			config = tolerantConfig(config, version, func(plane string) bool { return r.servesWith(plane, resource, content) })
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if s, ok := shared[key]; ok {
			s.refs++
			return s.store, r.release(shared, key), nil
		}
		raw, destroy, err := r.build(resource, inner, config, resourcePrefix, cacheKeyFunc, newFunc, newListFunc, getAttrsFunc, indexers)
		if err != nil {
			return nil, nil, err
		}
		store := &Store{Interface: raw, resource: resource, resourcePrefix: resourcePrefix, content: content, registry: r,
			newFunc: newFunc, newListFunc: newListFunc, codec: codecOf(config),
			keyPrefix: datastoreKeyPrefix(config), mirror: hasFamilyLocked(shared, family)}
		store.gone, store.markGone = context.WithCancel(context.Background())
		shared[key] = &sharedStorage{store: store, destroy: destroy, refs: 1, family: family}
		if !store.mirror {
			for _, f := range r.onNew {
				go f(store)
			}
		}
		return store, r.release(shared, key), nil
	}
}

// build makes the underlying storage (normally a watch cache over the
// datastore) with plane-aware keys and the plane as trigger index.
func (r *Registry) build(resource schema.GroupResource, inner generic.StorageDecorator, config *storagebackend.ConfigForResource,
	resourcePrefix string, cacheKeyFunc func(obj runtime.Object) (string, error), newFunc, newListFunc func() runtime.Object,
	getAttrsFunc storage.AttrFunc, indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
	planeKeyFunc := func(obj runtime.Object) (string, error) {
		key, err := cacheKeyFunc(obj)
		if err != nil {
			return "", err
		}
		plane := planes.OfObject(obj)
		if plane == "" {
			return "", fmt.Errorf("%s object %q carries no %s annotation", resource, key, planes.Annotation)
		}
		return scopeKey(resourcePrefix, plane, key)
	}
	// The upstream trigger (pods by spec.nodeName, for kubelets) has no
	// use here; the plane is the one dimension every watcher is scoped by.
	trigger := storage.IndexerFuncs{PlaneField: planes.OfObject}
	transform, transformed := r.transforms[resource]
	switch {
	case r.uncached[resource] || (r.buildsCaches && undecorated(inner)):
		inner = r.datastore.undecoratedStorage
	case transformed || r.buildsCaches:
		inner = cachedStorage(transform, r.datastore)
	}
	return inner(config, resourcePrefix, planeKeyFunc, newFunc, newListFunc, withPlaneField(getAttrsFunc), trigger, indexers)
}

// Destroy stops every storage still built, whoever holds it: the last
// step of a shutdown, once nothing is served. A release after it is a
// no-op.
func (r *Registry) Destroy() {
	r.mu.Lock()
	var left []*sharedStorage
	for _, m := range []map[string]*sharedStorage{r.builtin, r.custom} {
		for key, s := range m {
			left = append(left, s)
			delete(m, key)
		}
	}
	r.mu.Unlock()
	// At once: a watch cache stops once its reflector's list ends, and
	// without a datastore quorum each list takes the client's request
	// timeout (7 s), one after another when stopped in turn.
	var stopping sync.WaitGroup
	for _, s := range left {
		stopping.Go(s.stop)
	}
	stopping.Wait()
}

func (s *sharedStorage) stop() {
	s.store.markGone()
	if s.destroy != nil {
		s.destroy()
	}
}

func (r *Registry) release(shared map[string]*sharedStorage, key string) factory.DestroyFunc {
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			s, ok := shared[key]
			if ok {
				s.refs--
				if s.refs > 0 {
					r.mu.Unlock()
					return
				}
				delete(shared, key)
			}
			r.mu.Unlock()
			if ok {
				s.stop()
			}
		})
	}
}

// withPlaneField adds PlaneField to the selectable fields of every object.
func withPlaneField(attrs storage.AttrFunc) storage.AttrFunc {
	if attrs == nil {
		attrs = storage.DefaultClusterScopedAttr
	}
	return func(obj runtime.Object) (labels.Set, fields.Set, error) {
		l, f, err := attrs(obj)
		if err != nil {
			return l, f, err
		}
		// Attribute functions build a new field set per call: adding to it
		// saves a copy per cached object.
		if f == nil {
			f = fields.Set{}
		}
		f[PlaneField] = planes.OfObject(obj)
		return l, f, nil
	}
}

// undecorated reports whether d is upstream's storage without a watch
// cache, what the server hands out when its watch cache is off.
func undecorated(d generic.StorageDecorator) bool {
	return reflect.ValueOf(d).Pointer() == reflect.ValueOf(generic.UndecoratedStorage).Pointer()
}
