package quota

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// fromCache lists from the shared watch cache (resourceVersion 0), as an
// informer's lister would.
var fromCache = storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: storage.Everything}

// Listers returns upstream's lister function for the objects of plane: each
// lister reads the plane's objects of one resource from its shared watch
// cache. A resource the plane does not serve lists as empty.
func Listers(ctx context.Context, registry *planestorage.Registry, plane string) func(schema.GroupVersionResource) (cache.GenericLister, error) {
	ctx = planes.WithPlane(ctx, plane)
	return func(gvr schema.GroupVersionResource) (cache.GenericLister, error) {
		return planeLister{ctx: ctx, registry: registry, plane: plane, resource: gvr.GroupResource()}, nil
	}
}

// planeLister is a cache.GenericLister over one plane's objects of one
// resource. Objects are the storage's internal types (the core evaluators
// accept them) and shared with the cache: read, never modify.
type planeLister struct {
	ctx       context.Context
	registry  *planestorage.Registry
	plane     string
	resource  schema.GroupResource
	namespace string
}

var _ cache.GenericLister = planeLister{}

func (l planeLister) List(selector labels.Selector) ([]runtime.Object, error) {
	s := l.registry.StorageFor(l.plane, l.resource)
	if s == nil {
		return nil, nil
	}
	key := s.ResourcePrefix()
	if l.namespace != "" {
		key += "/" + l.namespace
	}
	list := s.NewList()
	// No older than the resource's writes this server acknowledged: a
	// quota's calculation right after a create must count it.
	if err := s.GetListAfterWrites(l.ctx, key, fromCache, list); err != nil {
		return nil, fmt.Errorf("listing %s of plane %s: %w", l.resource, l.plane, err)
	}
	var out []runtime.Object
	err := meta.EachListItem(list, func(obj runtime.Object) error {
		accessor, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		if selector == nil || selector.Matches(labels.Set(accessor.GetLabels())) {
			out = append(out, obj)
		}
		return nil
	})
	return out, err
}

func (l planeLister) Get(name string) (runtime.Object, error) {
	s := l.registry.StorageFor(l.plane, l.resource)
	if s == nil {
		return nil, apierrors.NewNotFound(l.resource, name)
	}
	key := s.ResourcePrefix() + "/" + name
	if l.namespace != "" {
		key = s.ResourcePrefix() + "/" + l.namespace + "/" + name
	}
	obj := s.New()
	if err := s.Get(l.ctx, key, storage.GetOptions{ResourceVersion: "0"}, obj); err != nil {
		if storage.IsNotFound(err) {
			return nil, apierrors.NewNotFound(l.resource, name)
		}
		return nil, err
	}
	return obj, nil
}

func (l planeLister) ByNamespace(namespace string) cache.GenericNamespaceLister {
	l.namespace = namespace
	return l
}
