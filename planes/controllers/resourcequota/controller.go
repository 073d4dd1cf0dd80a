package resourcequota

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	api "k8s.io/kubernetes/pkg/apis/core"
	corev1conversion "k8s.io/kubernetes/pkg/apis/core/v1"
	quotainstall "k8s.io/kubernetes/pkg/quota/v1/install"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	planequota "kplane.dev/kplane/planes/quota"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/planes/workers"
)

// resyncPeriod is upstream's --resource-quota-sync-period: every quota is
// recalculated this often, which corrects usage charged by admission for
// a request that failed afterwards.
const resyncPeriod = 5 * time.Minute

var resourceQuotas = corev1.Resource("resourcequotas")

// Key names one ResourceQuota of a plane.
type Key struct{ Plane, Namespace, Name string }

type namespaceKey struct{ plane, namespace string }

// Config is what the controller works with.
type Config struct {
	// Client addresses the plane in each call's context (loopback.Controller).
	Client  *rest.Config
	Storage *planestorage.Registry
	Workers int
}

// Controller calculates the usage of every plane's ResourceQuotas.
type Controller struct {
	config Config
	client kubernetes.Interface
	queue  workqueue.TypedRateLimitingInterface[Key]
	// matching tells which quota names a resource's objects count against
	// (upstream's evaluators without listers).
	matching quota.Registry

	mu sync.RWMutex
	// quotas are the hard limits of every quota, by namespace: the
	// replenishment filter, and what tells a new spec from a status write.
	quotas map[namespaceKey]map[string]corev1.ResourceList
}

// New returns a controller; Run starts it.
func New(config Config) (*Controller, error) {
	client, err := kubernetes.NewForConfig(config.Client)
	if err != nil {
		return nil, fmt.Errorf("resource quota controller client: %w", err)
	}
	if config.Workers <= 0 {
		config.Workers = 2
	}
	matching, err := planequota.Evaluators(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("quota evaluators: %w", err)
	}
	return &Controller{config: config, client: client, matching: matching,
		quotas: map[namespaceKey]map[string]corev1.ResourceList{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[Key](),
			workqueue.TypedRateLimitingQueueConfig[Key]{Name: "kplane_resourcequota"})}, nil
}

// Wants implements controllers.Subscriber: quotas, and every resource a
// quota can count (upstream ignores the same ones).
func (c *Controller) Wants(r schema.GroupResource) bool {
	_, ignored := quotainstall.DefaultIgnoredResources()[r]
	return !ignored
}

// Upsert implements controllers.Subscriber.
func (c *Controller) Upsert(r schema.GroupResource, obj runtime.Object) {
	if r == resourceQuotas {
		c.upsertQuota(obj)
		return
	}
	// Creates were charged by admission; of updates, upstream's filter
	// recalculates pods that stopped counting and services and claims,
	// whose usage can change with an update.
	switch r {
	case corev1.Resource("pods"):
		if pod, ok := obj.(*api.Pod); ok && counted(pod) {
			return
		}
	case corev1.Resource("services"), corev1.Resource("persistentvolumeclaims"):
	default:
		return
	}
	c.replenish(r, obj)
}

// Delete implements controllers.Subscriber.
func (c *Controller) Delete(r schema.GroupResource, obj runtime.Object) {
	if r == resourceQuotas {
		c.deleteQuota(obj)
		return
	}
	c.replenish(r, obj)
}

func (c *Controller) upsertQuota(obj runtime.Object) {
	rq, ok := obj.(*api.ResourceQuota)
	if !ok {
		return
	}
	spec, status, used := external(rq.Spec.Hard), external(rq.Status.Hard), external(rq.Status.Used)
	ns := namespaceKey{plane: planes.OfObject(obj), namespace: rq.Namespace}
	chain := c.config.Storage.Chain(ns.plane)
	c.mu.Lock()
	byName := c.quotas[ns]
	if byName == nil {
		byName = map[string]corev1.ResourceList{}
		c.quotas[ns] = byName
	}
	known, seen := byName[rq.Name]
	if !seen {
		// A member's first write of a quota it inherits (admission's
		// charge, most often) is a write to a quota it already held.
		known, seen = c.inheritedLocked(chain, rq.Namespace, rq.Name)
	}
	byName[rq.Name] = spec
	c.mu.Unlock()
	// Upstream's informer handlers: a quota seen for the first time, or
	// whose spec changed, is calculated; a write of its status alone is
	// not (this controller and admission make those).
	if !seen || !quota.Equals(known, spec) || !apiequality.Semantic.DeepEqual(spec, status) || missingUsage(status, used) {
		c.queue.Add(Key{Plane: ns.plane, Namespace: ns.namespace, Name: rq.Name})
	}
}

func missingUsage(hard, used corev1.ResourceList) bool {
	for name := range hard {
		if _, ok := used[name]; !ok {
			return true
		}
	}
	return false
}

func (c *Controller) deleteQuota(obj runtime.Object) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ns := namespaceKey{plane: planes.OfObject(obj), namespace: accessor.GetNamespace()}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.quotas[ns], accessor.GetName())
	if len(c.quotas[ns]) == 0 {
		delete(c.quotas, ns)
	}
}

// inheritedLocked returns the hard limits of the quota name of namespace
// in the nearest of chain (a plane's templates) that holds one.
func (c *Controller) inheritedLocked(chain []string, namespace, name string) (corev1.ResourceList, bool) {
	for _, template := range chain {
		if hard, ok := c.quotas[namespaceKey{plane: template, namespace: namespace}][name]; ok {
			return hard, true
		}
	}
	return nil, false
}

// replenish queues the quotas of obj's namespace that count r (upstream's
// replenishQuota), those its plane inherits from its templates included: a
// member holds them as a copied plane holds copies. A namespace without
// quotas costs a map lookup per plane of the chain.
func (c *Controller) replenish(r schema.GroupResource, obj runtime.Object) {
	accessor, err := meta.Accessor(obj)
	if err != nil || accessor.GetNamespace() == "" {
		return
	}
	plane, namespace := planes.OfObject(obj), accessor.GetNamespace()
	holders := append([]string{plane}, c.config.Storage.Chain(plane)...)
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, holder := range holders {
		for name, hard := range c.quotas[namespaceKey{plane: holder, namespace: namespace}] {
			if c.counts(r, hard) {
				c.queue.Add(Key{Plane: plane, Namespace: namespace, Name: name})
			}
		}
	}
}

// addWithMembers queues a quota of plane and the same quota of every plane
// that inherits it.
func (c *Controller) addWithMembers(key Key) {
	c.queue.Add(key)
	for _, member := range c.config.Storage.Members(key.Plane) {
		c.queue.Add(Key{Plane: member, Namespace: key.Namespace, Name: key.Name})
	}
}

// counts reports whether objects of r count against one of hard's names.
func (c *Controller) counts(r schema.GroupResource, hard corev1.ResourceList) bool {
	names := quota.ResourceNames(hard)
	if evaluator := c.matching.Get(r); evaluator != nil && len(evaluator.MatchingResources(names)) > 0 {
		return true
	}
	for _, name := range names {
		if gr, ok := planequota.CountedResource(name); ok && gr == r {
			return true
		}
	}
	return false
}

// StoreSynced implements controllers.LateStoreSubscriber: the first list of
// a storage built while the server runs (a custom resource's) may hold
// objects whose creation or deletion was never seen as an event, so every
// quota that counts the resource is calculated again.
func (c *Controller) StoreSynced(r schema.GroupResource) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for ns, byName := range c.quotas {
		for name, hard := range byName {
			if c.counts(r, hard) {
				c.addWithMembers(Key{Plane: ns.plane, Namespace: ns.namespace, Name: name})
			}
		}
	}
}

// ForgetPlane drops what the controller holds for a deleted plane.
func (c *Controller) ForgetPlane(plane string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ns := range c.quotas {
		if ns.plane == plane {
			delete(c.quotas, ns)
		}
	}
}

// Run processes quotas until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	go workers.Run(ctx, c.queue, c.config.Workers, "resource quota", c.syncKey)
	wait.UntilWithContext(ctx, func(context.Context) { c.resyncAll() }, resyncPeriod)
}

func (c *Controller) resyncAll() {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for ns, byName := range c.quotas {
		for name := range byName {
			c.addWithMembers(Key{Plane: ns.plane, Namespace: ns.namespace, Name: name})
		}
	}
}

// syncKey syncs one quota's status; a quota or plane that is gone has
// nothing left to sync.
func (c *Controller) syncKey(ctx context.Context, key Key) error {
	err := c.sync(planes.WithPlane(ctx, key.Plane), key)
	if apierrors.IsNotFound(err) || lifecycle.Refused(err) {
		return nil
	}
	return err
}

// sync is upstream's syncResourceQuota on the plane's objects in the
// shared caches.
func (c *Controller) sync(ctx context.Context, key Key) error {
	rq, err := c.cached(ctx, key)
	if err != nil || rq == nil {
		return err
	}
	statusLimitsDirty := !apiequality.Semantic.DeepEqual(rq.Spec.Hard, rq.Status.Hard)
	dirty := statusLimitsDirty || rq.Status.Hard == nil || rq.Status.Used == nil

	used := corev1.ResourceList{}
	if rq.Status.Used != nil {
		used = quota.Add(corev1.ResourceList{}, rq.Status.Used)
	}
	hardLimits := quota.Add(corev1.ResourceList{}, rq.Spec.Hard)
	registry, err := planequota.Evaluators(planequota.Listers(ctx, c.config.Storage, key.Plane), hardLimits)
	if err != nil {
		return err
	}
	var errs []error
	newUsage, err := quota.CalculateUsage(rq.Namespace, rq.Spec.Scopes, hardLimits, registry, rq.Spec.ScopeSelector)
	if err != nil {
		// As upstream: what could be calculated is still written.
		errs = append(errs, err)
	}
	for name, value := range newUsage {
		used[name] = value
	}
	used = quota.Mask(used, quota.ResourceNames(hardLimits))

	usage := rq.DeepCopy()
	usage.Status = corev1.ResourceQuotaStatus{Hard: hardLimits, Used: used}
	if dirty || !quota.Equals(usage.Status.Used, rq.Status.Used) {
		if _, err := c.client.CoreV1().ResourceQuotas(usage.Namespace).UpdateStatus(ctx, usage, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, err)
		}
	}
	return utilerrors.NewAggregate(errs)
}

// cached reads the quota from the shared watch cache (nil when it is gone).
func (c *Controller) cached(ctx context.Context, key Key) (*corev1.ResourceQuota, error) {
	s := c.config.Storage.Storage(resourceQuotas)
	if s == nil {
		return nil, fmt.Errorf("resourcequotas are not served yet")
	}
	internal := &api.ResourceQuota{}
	err := s.Get(ctx, s.ResourcePrefix()+"/"+key.Namespace+"/"+key.Name, storage.GetOptions{ResourceVersion: "0"}, internal)
	if storage.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := &corev1.ResourceQuota{}
	if err := corev1conversion.Convert_core_ResourceQuota_To_v1_ResourceQuota(internal, out, nil); err != nil {
		return nil, err
	}
	return out.DeepCopy(), nil
}

// external copies an internal resource list.
func external(in api.ResourceList) corev1.ResourceList {
	if in == nil {
		return nil
	}
	out := make(corev1.ResourceList, len(in))
	for name, q := range in {
		out[corev1.ResourceName(name)] = q.DeepCopy()
	}
	return out
}
