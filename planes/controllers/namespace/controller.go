package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubernetes/pkg/controller/namespace/deletion"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/planes/workers"
)

// Key names a namespace of a plane.
type Key struct{ Plane, Name string }

// Config is what the controller works with.
type Config struct {
	// Client addresses the plane in each call's context (loopback.Controller).
	Client *rest.Config
	// Resources returns the namespaced resources plane serves, as its
	// discovery lists them.
	Resources func(ctx context.Context, plane string) ([]*metav1.APIResourceList, error)
	// Storage finds the plane-scoped storage of a resource, to tell from
	// memory which resources hold anything in a namespace.
	Storage *planestorage.Registry
	// CustomResources builds the storage of a plane's CRDs.
	CustomResources interface {
		EnsureStorages(ctx context.Context, plane string) error
	}
	Workers int
}

// Controller deletes the content of terminating namespaces in all planes.
type Controller struct {
	config     Config
	namespaces kubernetes.Interface
	metadata   metadata.Interface
	queue      workqueue.TypedRateLimitingInterface[Key]

	// terminating holds the namespaces being deleted, so that the deletion
	// of their last objects wakes them up at once instead of at the next
	// estimate.
	mu          sync.Mutex
	terminating map[Key]struct{}
}

// New returns a controller; Run starts it.
func New(config Config) (*Controller, error) {
	clients, err := kubernetes.NewForConfig(config.Client)
	if err != nil {
		return nil, fmt.Errorf("namespace controller client: %w", err)
	}
	md, err := metadata.NewForConfig(config.Client)
	if err != nil {
		return nil, fmt.Errorf("namespace controller metadata client: %w", err)
	}
	if config.Workers <= 0 {
		config.Workers = 4
	}
	return &Controller{
		config: config, namespaces: clients, metadata: md, terminating: map[Key]struct{}{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			// Upstream's namespace controller backs off the same way: content
			// with finalizers is usually released within seconds.
			workqueue.NewTypedItemExponentialFailureRateLimiter[Key](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[Key]{Name: "kplane_namespace"}),
	}, nil
}

var namespacesResource = schema.GroupResource{Resource: "namespaces"}

// Wants implements controllers.Subscriber: namespaces, and the deletions
// of every resource's objects.
func (c *Controller) Wants(schema.GroupResource) bool { return true }

// Upsert implements controllers.Subscriber: a namespace with a deletion
// timestamp is work.
func (c *Controller) Upsert(resource schema.GroupResource, obj runtime.Object) {
	if resource != namespacesResource {
		return
	}
	accessor, err := meta.Accessor(obj)
	if err != nil || accessor.GetDeletionTimestamp() == nil {
		return
	}
	key := Key{Plane: planes.OfObject(obj), Name: accessor.GetName()}
	c.mu.Lock()
	c.terminating[key] = struct{}{}
	c.mu.Unlock()
	c.queue.Add(key)
}

// Delete implements controllers.Subscriber.
func (c *Controller) Delete(resource schema.GroupResource, obj runtime.Object) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	plane := planes.OfObject(obj)
	if resource == namespacesResource {
		c.mu.Lock()
		delete(c.terminating, Key{Plane: plane, Name: accessor.GetName()})
		c.mu.Unlock()
		return
	}
	ns := accessor.GetNamespace()
	if ns == "" {
		return
	}
	key := Key{Plane: plane, Name: ns}
	c.mu.Lock()
	_, waiting := c.terminating[key]
	c.mu.Unlock()
	if waiting {
		c.queue.Add(key)
	}
}

// ForgetPlane drops the namespaces of a deleted plane.
func (c *Controller) ForgetPlane(plane string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.terminating {
		if key.Plane == plane {
			delete(c.terminating, key)
		}
	}
}

// Run processes namespaces until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	workers.Run(ctx, c.queue, c.config.Workers, "namespace deletion", c.syncKey)
}

// syncKey deletes one namespace's content as far as it can now.
func (c *Controller) syncKey(ctx context.Context, key Key) error {
	err := c.sync(ctx, key)
	var remaining *deletion.ResourcesRemainingError
	switch {
	case errors.As(err, &remaining):
		// Content with finalizers or graceful deletion: look again when
		// upstream would, but never later than its estimate.
		c.queue.AddAfter(key, time.Duration(remaining.Estimate/2+1)*time.Second)
		return nil
	case lifecycle.Refused(err):
		// The plane is being deleted or is gone: its wipe takes over.
		return nil
	}
	return err
}

func (c *Controller) sync(ctx context.Context, key Key) error {
	ctx = planes.WithPlane(ctx, key.Plane)
	// What this pass deletes is decided on the plane as it is now: a reset
	// meanwhile gives back the template's namespace and content, which the
	// pass's later requests must not reach.
	ctx = lifecycle.WithResetRevision(ctx, c.config.Storage.ResetRevision(key.Plane))
	deleter := deletion.NewNamespacedResourcesDeleter(ctx, c.namespaces.CoreV1().Namespaces(), c.metadata,
		c.namespaces.CoreV1(), c.discoverer(ctx, key), v1.FinalizerKubernetes)
	return deleter.Delete(ctx, key.Name)
}

// discoverer returns the deletable namespaced resources of the plane, as
// its discovery serves them, narrowed to those that hold anything in the
// namespace according to the shared caches: most resources of a namespace
// are empty, and the upstream deleter issues two datastore reads for every
// resource it is given. Objects written after the namespace started
// terminating are refused by admission; the deleter lists each resource it
// handles again until it is empty.
func (c *Controller) discoverer(ctx context.Context, key Key) func() ([]*metav1.APIResourceList, error) {
	// The deleter asks twice per sync (for its verb cache, then for the
	// content); one look at the caches serves both.
	var once sync.Once
	var lists []*metav1.APIResourceList
	var err error
	discover := c.discover(ctx, key)
	return func() ([]*metav1.APIResourceList, error) {
		once.Do(func() { lists, err = discover() })
		return lists, err
	}
}

func (c *Controller) discover(ctx context.Context, key Key) func() ([]*metav1.APIResourceList, error) {
	return func() ([]*metav1.APIResourceList, error) {
		lists, discoveryErr := c.config.Resources(ctx, key.Plane)
		if c.config.CustomResources != nil {
			if err := c.config.CustomResources.EnsureStorages(ctx, key.Plane); err != nil {
				return nil, err
			}
		}
		out := make([]*metav1.APIResourceList, 0, len(lists))
		for _, list := range lists {
			gv, err := schema.ParseGroupVersion(list.GroupVersion)
			if err != nil {
				continue
			}
			kept := &metav1.APIResourceList{GroupVersion: list.GroupVersion}
			for _, r := range list.APIResources {
				if c.holdsAny(ctx, key.Plane, gv.WithResource(r.Name).GroupResource(), key.Name) {
					kept.APIResources = append(kept.APIResources, r)
				}
			}
			if len(kept.APIResources) > 0 {
				out = append(out, kept)
			}
		}
		if len(out) == 0 {
			// The upstream deleter takes an empty discovery for a broken
			// server and exits the process; an empty namespace has at
			// least its (empty) ConfigMaps checked.
			out = append(out, &metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{{
				Name: "configmaps", Namespaced: true, Kind: "ConfigMap",
				Verbs: metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"},
			}}})
		}
		return out, discoveryErr
	}
}

// holdsAny reports whether resource holds any object in namespace, from
// memory; when the resource's storage is unknown it answers true, and the
// deleter finds out.
func (c *Controller) holdsAny(ctx context.Context, plane string, resource schema.GroupResource, namespace string) bool {
	s := c.config.Storage.StorageFor(plane, resource)
	if s == nil {
		return true
	}
	list := s.NewList()
	if err := s.GetList(ctx, s.ResourcePrefix()+"/"+namespace, storageListFromCache, list); err != nil {
		return true
	}
	return meta.LenList(list) > 0
}
