package policies

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/quota"
	planestorage "kplane.dev/kplane/planes/storage"
)

// planeObjects reads one plane's objects of one resource: from the shared
// watch cache, and for a name the cache does not hold (yet) from the
// datastore, as upstream's matcher and param lookup fall back to a live
// read when an informer lags. Objects come out at version, as an informer
// of that version would hand them out.
type planeObjects struct {
	ctx      context.Context
	registry *planestorage.Registry
	plane    string
	resource schema.GroupResource
	version  schema.GroupVersion
	cached   cache.GenericLister
	// namespace narrows Get and List; "" for cluster-scoped resources or
	// all namespaces.
	namespace string
}

func newPlaneObjects(registry *planestorage.Registry, plane string, gvr schema.GroupVersionResource) planeObjects {
	ctx := planes.WithPlane(context.Background(), plane)
	lister, _ := quota.Listers(ctx, registry, plane)(gvr)
	return planeObjects{ctx: ctx, registry: registry, plane: plane, resource: gvr.GroupResource(), version: gvr.GroupVersion(), cached: lister}
}

var _ cache.GenericLister = planeObjects{}

func (o planeObjects) List(selector labels.Selector) ([]runtime.Object, error) {
	items, err := o.scoped().List(selector)
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Object, 0, len(items))
	for _, item := range items {
		versioned, err := o.external(item)
		if err != nil {
			return nil, err
		}
		out = append(out, versioned)
	}
	return out, nil
}

func (o planeObjects) Get(name string) (runtime.Object, error) {
	obj, err := o.scoped().Get(name)
	if apierrors.IsNotFound(err) {
		obj, err = o.live(name)
	}
	if err != nil {
		return nil, err
	}
	return o.external(obj)
}

func (o planeObjects) scoped() cache.GenericNamespaceLister {
	if o.namespace != "" {
		return o.cached.ByNamespace(o.namespace)
	}
	return o.cached
}

func (o planeObjects) ByNamespace(namespace string) cache.GenericNamespaceLister {
	o.namespace = namespace
	return o
}

// live reads name from the datastore.
func (o planeObjects) live(name string) (runtime.Object, error) {
	s := o.registry.StorageFor(o.plane, o.resource)
	if s == nil {
		return nil, apierrors.NewNotFound(o.resource, name)
	}
	key := s.ResourcePrefix() + "/" + name
	if o.namespace != "" {
		key = s.ResourcePrefix() + "/" + o.namespace + "/" + name
	}
	obj := s.New()
	if err := s.Get(o.ctx, key, storage.GetOptions{}, obj); err != nil {
		if storage.IsNotFound(err) {
			return nil, apierrors.NewNotFound(o.resource, name)
		}
		return nil, fmt.Errorf("reading %s %s of plane %s: %w", o.resource, name, o.plane, err)
	}
	return obj, nil
}

// external converts a stored object (internal for built-in resources,
// shared with the cache) into a copy at the requested version, with an
// empty TypeMeta as upstream's typed informers hand them out. Custom
// resources are stored as they are served.
func (o planeObjects) external(obj runtime.Object) (runtime.Object, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.DeepCopy(), nil
	}
	out, err := legacyscheme.Scheme.ConvertToVersion(obj.DeepCopyObject(), o.version)
	if err != nil {
		return nil, fmt.Errorf("converting %s of plane %s to %s: %w", o.resource, o.plane, o.version, err)
	}
	out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return out, nil
}

// namespaceLister is the plane's namespaces for upstream's matcher
// (namespaceSelector, the namespace variable of CEL).
type namespaceLister struct{ objects planeObjects }

var _ corelisters.NamespaceLister = namespaceLister{}

func newNamespaceLister(registry *planestorage.Registry, plane string) namespaceLister {
	return namespaceLister{objects: newPlaneObjects(registry, plane, corev1.SchemeGroupVersion.WithResource("namespaces"))}
}

func (l namespaceLister) List(selector labels.Selector) ([]*corev1.Namespace, error) {
	items, err := l.objects.List(selector)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Namespace, 0, len(items))
	for _, item := range items {
		if ns, ok := item.(*corev1.Namespace); ok {
			out = append(out, ns)
		}
	}
	return out, nil
}

func (l namespaceLister) Get(name string) (*corev1.Namespace, error) {
	obj, err := l.objects.Get(name)
	if err != nil {
		return nil, err
	}
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil, fmt.Errorf("unexpected %T in namespaces", obj)
	}
	return ns, nil
}

// paramInformer hands upstream's param collection the params of a plane:
// a lister over the plane's objects of the paramKind. Nothing is watched
// for it; the shared cache is always synced once the server serves, so
// the informer reports synced and is never run.
type paramInformer struct {
	objects planeObjects
}

var _ informers.GenericInformer = paramInformer{}

func (p paramInformer) Informer() cache.SharedIndexInformer { return syncedInformer{} }
func (p paramInformer) Lister() cache.GenericLister         { return p.objects }

// syncedInformer answers upstream's only question to a param informer
// (HasSynced); its other methods are never called.
type syncedInformer struct{ cache.SharedIndexInformer }

func (syncedInformer) HasSynced() bool { return true }

func scopeOf(namespaced bool) meta.RESTScope {
	if namespaced {
		return meta.RESTScopeNamespace
	}
	return meta.RESTScopeRoot
}

// namespaceClient answers the one call upstream's matcher makes to its
// client (a namespace its lister did not find) from the plane's lister,
// which has read the datastore already. A clientset per plane would cost
// hundreds of KiB for nothing more. Nothing else of it is ever called.
type namespaceClient struct {
	kubernetes.Interface
	namespaces namespaceLister
}

func (c namespaceClient) CoreV1() corev1client.CoreV1Interface {
	return namespaceCore{namespaces: c.namespaces}
}

type namespaceCore struct {
	corev1client.CoreV1Interface
	namespaces namespaceLister
}

func (c namespaceCore) Namespaces() corev1client.NamespaceInterface {
	return namespaceGetter{namespaces: c.namespaces}
}

type namespaceGetter struct {
	corev1client.NamespaceInterface
	namespaces namespaceLister
}

func (g namespaceGetter) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	return g.namespaces.Get(name)
}
