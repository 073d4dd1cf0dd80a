package serviceaccounts

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	api "k8s.io/kubernetes/pkg/apis/core"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/planes/workers"
)

const (
	// DefaultServiceAccount is created in every namespace.
	DefaultServiceAccount = "default"
	// RootCAConfigMap is the ConfigMap every namespace gets with the CA.
	RootCAConfigMap = "kube-root-ca.crt"
	rootCAKey       = "ca.crt"
)

// Key names a namespace of a plane.
type Key struct{ Plane, Namespace string }

// Config is what the controller works with.
type Config struct {
	// Client addresses the plane in each call's context (loopback.Controller).
	Client *rest.Config
	// Stores returns the plane-scoped storage of a core resource.
	Stores func(resource string) *planestorage.Store
	// CACert goes into every kube-root-ca.crt ConfigMap.
	CACert  []byte
	Workers int
}

// Controller keeps the default ServiceAccount and root CA ConfigMap.
type Controller struct {
	config Config
	client kubernetes.Interface
	queue  workqueue.TypedRateLimitingInterface[Key]
}

// New returns a controller; Run starts it.
func New(config Config) (*Controller, error) {
	client, err := kubernetes.NewForConfig(config.Client)
	if err != nil {
		return nil, fmt.Errorf("service account controller client: %w", err)
	}
	if config.Workers <= 0 {
		config.Workers = 2
	}
	return &Controller{config: config, client: client,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[Key](),
			workqueue.TypedRateLimitingQueueConfig[Key]{Name: "kplane_serviceaccounts"})}, nil
}

var (
	namespaces      = schema.GroupResource{Resource: "namespaces"}
	serviceAccounts = schema.GroupResource{Resource: "serviceaccounts"}
	configMaps      = schema.GroupResource{Resource: "configmaps"}
)

// Wants implements controllers.Subscriber.
func (c *Controller) Wants(r schema.GroupResource) bool {
	return r == namespaces || r == serviceAccounts || r == configMaps
}

// Upsert implements controllers.Subscriber.
func (c *Controller) Upsert(r schema.GroupResource, obj runtime.Object) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	switch {
	case r == namespaces && accessor.GetDeletionTimestamp() == nil:
		c.queue.Add(Key{Plane: planes.OfObject(obj), Namespace: accessor.GetName()})
	case r == configMaps && accessor.GetName() == RootCAConfigMap:
		// A changed CA (or an edited ConfigMap) is put back.
		if cm, ok := obj.(*api.ConfigMap); !ok || cm.Data[rootCAKey] != string(c.config.CACert) {
			c.queue.Add(Key{Plane: planes.OfObject(obj), Namespace: accessor.GetNamespace()})
		}
	}
}

// Delete implements controllers.Subscriber.
func (c *Controller) Delete(r schema.GroupResource, obj runtime.Object) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	if (r == serviceAccounts && accessor.GetName() == DefaultServiceAccount) ||
		(r == configMaps && accessor.GetName() == RootCAConfigMap) {
		c.queue.Add(Key{Plane: planes.OfObject(obj), Namespace: accessor.GetNamespace()})
	}
}

// Run processes namespaces until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	workers.Run(ctx, c.queue, c.config.Workers, "service account", c.syncKey)
}

// syncKey syncs one namespace's service account; a namespace or plane on
// its way out needs none.
func (c *Controller) syncKey(ctx context.Context, key Key) error {
	if err := c.sync(planes.WithPlane(ctx, key.Plane), key); !gone(err) {
		return err
	}
	return nil
}

// gone is an error that retrying cannot fix: the namespace or plane went
// away, or the namespace is terminating.
func gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) || lifecycle.Refused(err)
}

func (c *Controller) sync(ctx context.Context, key Key) error {
	ns, ok := c.cached(ctx, "namespaces", key.Namespace, "").(*api.Namespace)
	if !ok || ns.DeletionTimestamp != nil || ns.Status.Phase == api.NamespaceTerminating {
		return nil
	}
	if c.cached(ctx, "serviceaccounts", DefaultServiceAccount, key.Namespace) == nil {
		_, err := c.client.CoreV1().ServiceAccounts(key.Namespace).Create(ctx, &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: DefaultServiceAccount},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the default service account: %w", err)
		}
	}
	return c.syncRootCA(ctx, key.Namespace)
}

func (c *Controller) syncRootCA(ctx context.Context, namespace string) error {
	cm, _ := c.cached(ctx, "configmaps", RootCAConfigMap, namespace).(*api.ConfigMap)
	switch {
	case cm == nil:
		_, err := c.client.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: RootCAConfigMap},
			Data:       map[string]string{rootCAKey: string(c.config.CACert)},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s: %w", RootCAConfigMap, err)
		}
	case !bytes.Equal([]byte(cm.Data[rootCAKey]), c.config.CACert) || len(cm.Data) != 1:
		current, err := c.client.CoreV1().ConfigMaps(namespace).Get(ctx, RootCAConfigMap, metav1.GetOptions{})
		if err != nil {
			return err
		}
		current.Data = map[string]string{rootCAKey: string(c.config.CACert)}
		if _, err := c.client.CoreV1().ConfigMaps(namespace).Update(ctx, current, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating %s: %w", RootCAConfigMap, err)
		}
	}
	return nil
}

// cached reads one object from the shared watch cache, or nil.
func (c *Controller) cached(ctx context.Context, resource, name, namespace string) runtime.Object {
	s := c.config.Stores(resource)
	if s == nil {
		return nil
	}
	key := s.ResourcePrefix() + "/" + name
	if namespace != "" {
		key = s.ResourcePrefix() + "/" + namespace + "/" + name
	}
	obj := s.New()
	if err := s.Get(ctx, key, storage.GetOptions{ResourceVersion: "0"}, obj); err != nil {
		return nil
	}
	return obj
}
