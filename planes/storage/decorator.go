package storage

import (
	"fmt"
	"sync"

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
type Registry struct {
	mu         sync.Mutex
	shared     map[string]*sharedStorage
	transforms map[schema.GroupResource]Transform
	onNew      []func(*Store)
}

// OnNewStore calls f with every storage built so far and every storage
// built from now on (custom resources appear while the server runs).
func (r *Registry) OnNewStore(f func(*Store)) {
	r.mu.Lock()
	r.onNew = append(r.onNew, f)
	existing := make([]*Store, 0, len(r.shared))
	for _, s := range r.shared {
		existing = append(existing, s.store)
	}
	r.mu.Unlock()
	for _, s := range existing {
		f(s)
	}
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{shared: map[string]*sharedStorage{}, transforms: map[schema.GroupResource]Transform{}}
}

// SetCacheTransform makes the watch cache of resource keep objects through
// transform. Call it before the resource's registry is built.
func (r *Registry) SetCacheTransform(resource schema.GroupResource, transform Transform) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.transforms[resource] = transform
}

// RESTOptionsGetter hands out plane-scoped storage for every resource.
type RESTOptionsGetter struct {
	delegate generic.RESTOptionsGetter
	registry *Registry
}

type sharedStorage struct {
	store   *Store
	destroy factory.DestroyFunc
	refs    int
}

// Wrap returns a getter that hands out delegate's storage (normally the
// upstream StorageFactoryRestOptionsFactory), plane-scoped and registered
// here.
func (r *Registry) Wrap(delegate generic.RESTOptionsGetter) *RESTOptionsGetter {
	return &RESTOptionsGetter{delegate: delegate, registry: r}
}

// GetRESTOptions implements generic.RESTOptionsGetter.
func (g *RESTOptionsGetter) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.delegate.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	opts.Decorator = g.registry.decorate(resource, opts.Decorator)
	return opts, nil
}

// Storage returns the plane-scoped storage already built for a resource,
// or nil when no registry for it exists yet.
func (r *Registry) Storage(resource schema.GroupResource) *Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.shared {
		if s.store.resource == resource {
			return s.store
		}
	}
	return nil
}

// Stores returns every storage built so far.
func (r *Registry) Stores() []*Store {
	r.mu.Lock()
	defer r.mu.Unlock()
	stores := make([]*Store, 0, len(r.shared))
	for _, s := range r.shared {
		stores = append(stores, s.store)
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

func (r *Registry) decorate(resource schema.GroupResource, inner generic.StorageDecorator) generic.StorageDecorator {
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
		key := memoKey(config, resourcePrefix)
		r.mu.Lock()
		defer r.mu.Unlock()
		if s, ok := r.shared[key]; ok {
			s.refs++
			return s.store, r.release(key), nil
		}

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

		if transform, ok := r.transforms[resource]; ok {
			inner = cachedStorage(transform)
		}
		raw, destroy, err := inner(config, resourcePrefix, planeKeyFunc, newFunc, newListFunc,
			withPlaneField(getAttrsFunc), trigger, indexers)
		if err != nil {
			return nil, nil, err
		}
		store := &Store{Interface: raw, resource: resource, resourcePrefix: resourcePrefix, newFunc: newFunc, newListFunc: newListFunc, gone: make(chan struct{})}
		r.shared[key] = &sharedStorage{store: store, destroy: destroy, refs: 1}
		for _, f := range r.onNew {
			go f(store)
		}
		return store, r.release(key), nil
	}
}

func (r *Registry) release(key string) factory.DestroyFunc {
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			s, ok := r.shared[key]
			if ok {
				s.refs--
				if s.refs > 0 {
					r.mu.Unlock()
					return
				}
				delete(r.shared, key)
			}
			r.mu.Unlock()
			if ok {
				close(s.store.gone)
				if s.destroy != nil {
					s.destroy()
				}
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
