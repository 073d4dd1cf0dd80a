package webhooks

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// fromCache reads the shared watch cache, as an informer's lister would.
const fromCache = "0"

// objects reads one plane's objects of the built-in resources from the
// shared watch caches. The objects are the storage's internal types,
// shared with the cache: read, never modify.
type objects struct {
	registry *planestorage.Registry
	plane    string
}

func (o objects) store(resource schema.GroupResource) (*planestorage.Store, error) {
	s := o.registry.Storage(resource)
	if s == nil {
		return nil, fmt.Errorf("%s are not served yet", resource)
	}
	return s, nil
}

// list returns the plane's objects of resource in namespace ("" for all,
// or for a cluster-scoped resource).
func (o objects) list(ctx context.Context, resource schema.GroupResource, namespace string) ([]runtime.Object, error) {
	s, err := o.store(resource)
	if err != nil {
		return nil, err
	}
	key := s.ResourcePrefix()
	if namespace != "" {
		key += "/" + namespace
	}
	list := s.NewList()
	// No older than this server's writes, as quota and policy admission
	// read: a configuration its client saw created acts on the next request.
	opts := storage.ListOptions{ResourceVersion: fromCache, Recursive: true, Predicate: storage.Everything}
	if err := s.GetListAfterWrites(planes.WithPlane(ctx, o.plane), key, opts, list); err != nil {
		return nil, fmt.Errorf("listing %s of plane %s: %w", resource, o.plane, err)
	}
	return meta.ExtractList(list)
}

// get returns one object of the plane from the cache or, with
// resourceVersion "", from the datastore.
func (o objects) get(ctx context.Context, resource schema.GroupResource, namespace, name, resourceVersion string) (runtime.Object, error) {
	s, err := o.store(resource)
	if err != nil {
		return nil, err
	}
	key := s.ResourcePrefix() + "/" + name
	if namespace != "" {
		key = s.ResourcePrefix() + "/" + namespace + "/" + name
	}
	obj := s.New()
	if err := s.Get(planes.WithPlane(ctx, o.plane), key, storage.GetOptions{ResourceVersion: resourceVersion}, obj); err != nil {
		if storage.IsNotFound(err) {
			return nil, apierrors.NewNotFound(resource, name)
		}
		return nil, err
	}
	return obj, nil
}

// external converts an internal object of the storage into out, the
// versioned type upstream's webhook machinery reads.
func external[T runtime.Object](internal runtime.Object, out T) (T, error) {
	if err := legacyscheme.Scheme.Convert(internal, out, nil); err != nil {
		return out, fmt.Errorf("converting %T: %w", internal, err)
	}
	return out, nil
}
