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

// RESTOptionsGetter hands out plane-scoped storage for every resource.
type RESTOptionsGetter struct {
	delegate generic.RESTOptionsGetter

	mu sync.Mutex
	// shared memoises the decorated storage per resource prefix so that a
	// registry built more than once for the same resource (per-plane service
	// registries, for one) reuses the one watch cache instead of starting
	// another watch on the datastore.
	shared map[string]*sharedStorage
}

type sharedStorage struct {
	store   *Store
	destroy factory.DestroyFunc
	refs    int
}

// NewRESTOptionsGetter wraps delegate (normally the upstream
// StorageFactoryRestOptionsFactory) so that every storage it hands out is
// plane-scoped.
func NewRESTOptionsGetter(delegate generic.RESTOptionsGetter) *RESTOptionsGetter {
	return &RESTOptionsGetter{delegate: delegate, shared: map[string]*sharedStorage{}}
}

// GetRESTOptions implements generic.RESTOptionsGetter.
func (g *RESTOptionsGetter) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.delegate.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	opts.Decorator = g.decorate(resource, opts.Decorator)
	return opts, nil
}

// Storage returns the plane-scoped storage already built for resourcePrefix,
// or nil when no registry for it exists yet.
func (g *RESTOptionsGetter) Storage(resourcePrefix string) *Store {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.shared[resourcePrefix]; ok {
		return s.store
	}
	return nil
}

func (g *RESTOptionsGetter) decorate(resource schema.GroupResource, inner generic.StorageDecorator) generic.StorageDecorator {
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
		g.mu.Lock()
		defer g.mu.Unlock()
		if s, ok := g.shared[resourcePrefix]; ok {
			s.refs++
			return s.store, g.release(resourcePrefix), nil
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

		raw, destroy, err := inner(config, resourcePrefix, planeKeyFunc, newFunc, newListFunc,
			withPlaneField(getAttrsFunc), trigger, indexers)
		if err != nil {
			return nil, nil, err
		}
		store := &Store{Interface: raw, resource: resource, resourcePrefix: resourcePrefix, newFunc: newFunc, newListFunc: newListFunc}
		g.shared[resourcePrefix] = &sharedStorage{store: store, destroy: destroy, refs: 1}
		return store, g.release(resourcePrefix), nil
	}
}

func (g *RESTOptionsGetter) release(resourcePrefix string) factory.DestroyFunc {
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			s, ok := g.shared[resourcePrefix]
			if ok {
				s.refs--
				if s.refs > 0 {
					g.mu.Unlock()
					return
				}
				delete(g.shared, resourcePrefix)
			}
			g.mu.Unlock()
			if ok && s.destroy != nil {
				s.destroy()
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
		withPlane := make(fields.Set, len(f)+1)
		for k, v := range f {
			withPlane[k] = v
		}
		withPlane[PlaneField] = planes.OfObject(obj)
		return l, withPlane, nil
	}
}
