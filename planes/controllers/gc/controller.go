package gc

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/planes/workers"
)

// Resolver maps what an ownerReference names to resources of a plane.
type Resolver interface {
	// ForKind returns the resource of group/kind in plane, at a served
	// version, and whether it is namespaced.
	ForKind(ctx context.Context, plane string, gk schema.GroupKind) (schema.GroupVersionResource, bool, bool)
	// Version returns a served version of resource in plane.
	Version(ctx context.Context, plane string, resource schema.GroupResource) (string, bool)
}

// Config is what the collector works with.
type Config struct {
	// Client addresses the plane in each call's context (loopback.Controller).
	Client   *rest.Config
	Storage  *planestorage.Registry
	Resolver Resolver
	// CustomResources builds the storage of a plane's CRDs.
	CustomResources interface {
		EnsureStorages(ctx context.Context, plane string) error
	}
	// Synced is closed once the graph has seen every object that existed
	// at start; nothing is collected before.
	Synced  <-chan struct{}
	Workers int
}

type op int

const (
	// attempt checks a dependent's owners and deletes it (or drops
	// references) when they are gone or being deleted in the foreground.
	attempt op = iota
	// owner finishes an owner's foreground or orphan deletion.
	owner
)

type task struct {
	op op
	object
}

// Collector is the garbage collector of every plane.
type Collector struct {
	config Config
	graph  *graph
	client metadata.Interface
	queue  workqueue.TypedRateLimitingInterface[task]
}

// New returns a collector; Run starts it.
func New(config Config) (*Collector, error) {
	client, err := metadata.NewForConfig(config.Client)
	if err != nil {
		return nil, fmt.Errorf("garbage collector client: %w", err)
	}
	if config.Workers <= 0 {
		config.Workers = 4
	}
	return &Collector{config: config, graph: newGraph(), client: client,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[task](),
			workqueue.TypedRateLimitingQueueConfig[task]{Name: "kplane_garbage_collector"})}, nil
}

// Wants implements controllers.Subscriber: ownership spans every resource.
func (c *Collector) Wants(schema.GroupResource) bool { return true }

// Upsert implements controllers.Subscriber.
func (c *Collector) Upsert(resource schema.GroupResource, obj runtime.Object) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	o := object{plane: planes.OfObject(obj), resource: resource, namespace: accessor.GetNamespace(),
		name: accessor.GetName(), uid: accessor.GetUID()}
	if refs := accessor.GetOwnerReferences(); len(refs) > 0 {
		if changed, old := c.graph.upsert(&node{object: o, owners: slices.Clone(refs)}); changed {
			c.queue.Add(task{op: attempt, object: o})
			if old != nil {
				// A reference dropped or made non-blocking: an owner
				// waiting for this dependent may go on.
				c.ownersChanged(old)
			}
		}
	} else if n := c.graph.remove(o.plane, o.uid); n != nil {
		// Its references were dropped: an owner waiting for it may go on.
		c.ownersChanged(n)
	}
	if accessor.GetDeletionTimestamp() != nil {
		fins := accessor.GetFinalizers()
		if slices.Contains(fins, metav1.FinalizerOrphanDependents) || slices.Contains(fins, metav1.FinalizerDeleteDependents) {
			c.queue.Add(task{op: owner, object: o})
		}
	}
}

// Delete implements controllers.Subscriber.
func (c *Collector) Delete(_ schema.GroupResource, obj runtime.Object) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	plane, uid := planes.OfObject(obj), accessor.GetUID()
	if n := c.graph.remove(plane, uid); n != nil {
		c.ownersChanged(n)
	}
	for _, d := range c.graph.dependentsOf(plane, uid) {
		c.queue.Add(task{op: attempt, object: d.object})
	}
	c.inheritedDependents(plane, uid)
}

// inheritedDependents queues, as objects of plane, the dependents of owner
// that plane inherits from its templates: they are in the graph as their
// template's objects only, and the plane's deletion of an inherited owner
// (a tombstone) must collect them as it would copies. Each is decided on
// what plane serves (it may have changed or deleted it meanwhile).
func (c *Collector) inheritedDependents(plane string, owner types.UID) {
	if c.config.Storage == nil {
		return
	}
	for _, template := range c.config.Storage.Chain(plane) {
		for _, d := range c.graph.dependentsOf(template, owner) {
			o := d.object
			o.plane = plane
			c.queue.Add(task{op: attempt, object: o})
		}
	}
}

// StoreSynced implements controllers.LateStoreSubscriber: dependents of
// owners in the group of a storage built late may have lost their owner
// before its first list, unseen; they are looked at again.
func (c *Collector) StoreSynced(resource schema.GroupResource) {
	for _, n := range c.graph.ownedFromGroup(resource.Group) {
		c.queue.Add(task{op: attempt, object: n.object})
	}
}

// ownersChanged queues the owners of n, which may be waiting for n.
func (c *Collector) ownersChanged(n *node) {
	for _, ref := range n.owners {
		if o, ok := c.locate(context.Background(), n.object, ref); ok {
			c.queue.Add(task{op: owner, object: o})
		}
	}
}

// ForgetPlane drops what the collector holds for a deleted plane.
func (c *Collector) ForgetPlane(plane string) { c.graph.forgetPlane(plane) }

// Run collects until ctx is done.
func (c *Collector) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	select {
	case <-c.config.Synced:
	case <-ctx.Done():
		return
	}
	logrus.WithField("dependents", c.graph.size()).Debug("garbage collector graph synced")
	workers.Run(ctx, c.queue, c.config.Workers, "garbage collection", c.syncTask)
}

// syncTask runs one task; an object or plane that is gone is done with.
func (c *Collector) syncTask(ctx context.Context, t task) error {
	// Decided on the plane as it is now: a reset meanwhile gives back the
	// template's objects with the uids and resourceVersions the task's
	// preconditions name, and the task's requests must not reach them.
	pctx := lifecycle.WithResetRevision(planes.WithPlane(ctx, t.plane), c.config.Storage.ResetRevision(t.plane))
	var err error
	switch t.op {
	case attempt:
		err = c.attemptToDelete(pctx, t.object)
	case owner:
		err = c.processOwner(pctx, t.object)
	}
	if lifecycle.Refused(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ownerState is what a dependent learns about one of its owners.
type ownerState int

const (
	solid    ownerState = iota // exists
	dangling                   // absent (or not the object the reference names)
	waiting                    // being deleted in the foreground
)

// attemptToDelete decides on the cached dependent and acts; an action
// refused because the dependent changed meanwhile (its owners did) is
// decided again on the dependent as it now is.
func (c *Collector) attemptToDelete(ctx context.Context, o object) error {
	current, err := c.cached(ctx, o)
	for range 3 {
		if err != nil || current == nil {
			return err
		}
		current, err = c.decide(ctx, o, current)
	}
	if err == nil && current != nil {
		return fmt.Errorf("%s %s/%s: its owners kept changing", o.resource, o.namespace, o.name)
	}
	return err
}

// decide deletes the dependent current, or drops its references to owners
// that are gone or going, as upstream's attemptToDeleteItem does. Every
// deletion is pinned to current's resourceVersion: the decision holds for
// that version only. When the dependent has changed its owners since, decide
// returns it as it now is, to be decided again.
func (c *Collector) decide(ctx context.Context, o object, current metav1.Object) (metav1.Object, error) {
	if current.GetUID() != o.uid || current.GetDeletionTimestamp() != nil {
		return nil, nil
	}
	refs := current.GetOwnerReferences()
	var solids int
	var drop []types.UID
	var waitings int
	for _, ref := range refs {
		state, err := c.ownerState(ctx, o, ref)
		if err != nil {
			return nil, err
		}
		switch state {
		case solid:
			solids++
		case dangling:
			drop = append(drop, ref.UID)
		case waiting:
			waitings++
			drop = append(drop, ref.UID)
		}
	}
	switch {
	case len(drop) == 0:
		return nil, nil
	case solids > 0:
		// Upstream's rule: a dependent with a live owner stays; it only
		// loses its references to owners that are gone or going.
		return nil, c.removeOwnerRefs(ctx, o, drop)
	case waitings > 0:
		return c.deleteForOwner(ctx, o, current)
	default:
		policy := metav1.DeletePropagationBackground
		switch fins := current.GetFinalizers(); {
		case slices.Contains(fins, metav1.FinalizerOrphanDependents):
			policy = metav1.DeletePropagationOrphan
		case slices.Contains(fins, metav1.FinalizerDeleteDependents):
			policy = metav1.DeletePropagationForeground
		}
		return c.delete(ctx, o, current, policy)
	}
}

// deleteForOwner deletes current, whose owners are all gone or waiting for
// their dependents' deletion. With dependents of its own it is deleted in
// the foreground too; if one of those is itself waiting for its dependents,
// the owners may wait on each other in a circle, which upstream breaks by
// making the dependent's references non-blocking first, so that its
// owners do not wait for it.
func (c *Collector) deleteForOwner(ctx context.Context, o object, current metav1.Object) (metav1.Object, error) {
	if !c.graph.hasDependents(o.plane, o.uid) {
		return c.delete(ctx, o, current, metav1.DeletePropagationBackground)
	}
	circle, err := c.dependentWaiting(ctx, o)
	if err != nil {
		return nil, err
	}
	if circle {
		unblocked, err := c.unblockOwnerRefs(ctx, o, current.GetResourceVersion())
		switch {
		case apierrors.IsConflict(err) && !lifecycle.Refused(err):
			// Changed since the decision: decide again on what it is now.
			return c.consistent(ctx, o)
		case err != nil:
			return nil, err
		case unblocked != nil:
			current = unblocked
		}
	}
	return c.delete(ctx, o, current, metav1.DeletePropagationForeground)
}

// dependentWaiting reports whether a dependent of o is being deleted in the
// foreground (waiting for its own dependents).
func (c *Collector) dependentWaiting(ctx context.Context, o object) (bool, error) {
	for _, d := range c.graph.dependentsOf(o.plane, o.uid) {
		dep, err := c.cached(ctx, d.object)
		if err != nil {
			return false, err
		}
		if dep != nil && dep.GetUID() == d.uid && dep.GetDeletionTimestamp() != nil &&
			slices.Contains(dep.GetFinalizers(), metav1.FinalizerDeleteDependents) {
			return true, nil
		}
	}
	return false, nil
}

func (c *Collector) ownerState(ctx context.Context, dependent object, ref metav1.OwnerReference) (ownerState, error) {
	loc, ok := c.locate(ctx, dependent, ref)
	if !ok {
		// A kind the plane does not serve (yet): keep the dependent, as
		// upstream does while it cannot resolve the reference.
		return solid, nil
	}
	if dependent.namespace == "" && loc.namespace != "" {
		return dangling, nil
	}
	// The cache answers most lookups; absence is confirmed by a
	// consistent read before anything is deleted for it.
	found, err := c.cached(ctx, loc)
	if err != nil {
		return solid, err
	}
	if found == nil || found.GetUID() != ref.UID {
		found, err = c.consistent(ctx, loc)
		if err != nil {
			return solid, err
		}
	}
	switch {
	case found == nil || found.GetUID() != ref.UID:
		return dangling, nil
	case found.GetDeletionTimestamp() != nil && slices.Contains(found.GetFinalizers(), metav1.FinalizerDeleteDependents):
		return waiting, nil
	}
	return solid, nil
}

// locate finds the object an ownerReference of dependent names, in the
// dependent's plane (and namespace, when the owner is namespaced).
func (c *Collector) locate(ctx context.Context, dependent object, ref metav1.OwnerReference) (object, bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return object{}, false
	}
	gvr, namespaced, ok := c.config.Resolver.ForKind(ctx, dependent.plane, gv.WithKind(ref.Kind).GroupKind())
	if !ok {
		return object{}, false
	}
	o := object{plane: dependent.plane, resource: gvr.GroupResource(), name: ref.Name, uid: ref.UID}
	if namespaced {
		o.namespace = dependent.namespace
		if o.namespace == "" {
			// A cluster-scoped dependent cannot have a namespaced owner:
			// namespace it with a name no namespace can have.
			o.namespace = "-"
		}
	}
	return o, true
}

func (c *Collector) processOwner(ctx context.Context, o object) error {
	current, err := c.cached(ctx, o)
	if err != nil || current == nil || current.GetUID() != o.uid || current.GetDeletionTimestamp() == nil {
		return err
	}
	fins := current.GetFinalizers()
	switch {
	case slices.Contains(fins, metav1.FinalizerOrphanDependents):
		deps, err := c.dependents(ctx, o)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := c.removeOwnerRefs(ctx, d.object, []types.UID{o.uid}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return c.removeFinalizer(ctx, o, metav1.FinalizerOrphanDependents)
	case slices.Contains(fins, metav1.FinalizerDeleteDependents):
		deps, err := c.dependents(ctx, o)
		if err != nil {
			return err
		}
		blocking := 0
		for _, d := range deps {
			for _, ref := range d.owners {
				if ref.UID == o.uid && ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion {
					blocking++
				}
			}
			c.queue.Add(task{op: attempt, object: d.object})
		}
		if blocking > 0 {
			// Each blocking dependent's deletion queues this owner again.
			return nil
		}
		return c.removeFinalizer(ctx, o, metav1.FinalizerDeleteDependents)
	}
	return nil
}

// dependents returns the objects that name owner o: those in the graph,
// and those a consistent read of every resource of o's plane (and
// namespace) finds. The graph learns of objects through one watch per
// resource, in no order across resources, so a dependent written just
// before its owner's deletion may not be in it yet; releasing an owner
// (orphan) or letting it go (foreground) is final, and rare enough to pay
// for the read.
func (c *Collector) dependents(ctx context.Context, o object) ([]*node, error) {
	byUID := map[types.UID]*node{}
	for _, n := range c.graph.dependentsOf(o.plane, o.uid) {
		byUID[n.uid] = n
	}
	if c.config.CustomResources != nil {
		if err := c.config.CustomResources.EnsureStorages(ctx, o.plane); err != nil {
			return nil, err
		}
	}
	for _, s := range c.config.Storage.Stores() {
		if !s.Owns(o.plane) {
			continue
		}
		key := s.ResourcePrefix()
		if o.namespace != "" {
			// Only objects of its namespace can name a namespaced owner.
			key += "/" + o.namespace
		}
		list := s.NewList()
		if err := s.GetList(ctx, key, storage.ListOptions{Recursive: true, Predicate: storage.Everything}, list); err != nil {
			return nil, fmt.Errorf("listing %s for dependents of %s: %w", s.Resource(), o.name, err)
		}
		err := meta.EachListItem(list, func(obj runtime.Object) error {
			accessor, err := meta.Accessor(obj)
			if err != nil {
				return nil
			}
			refs := accessor.GetOwnerReferences()
			for _, ref := range refs {
				if ref.UID == o.uid {
					byUID[accessor.GetUID()] = &node{object: object{plane: o.plane, resource: s.Resource(),
						namespace: accessor.GetNamespace(), name: accessor.GetName(), uid: accessor.GetUID()}, owners: slices.Clone(refs)}
					break
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]*node, 0, len(byUID))
	for _, n := range byUID {
		out = append(out, n)
	}
	return out, nil
}

// cached reads o from the shared watch cache; nil when it is not there.
func (c *Collector) cached(ctx context.Context, o object) (metav1.Object, error) {
	return c.read(ctx, o, "0")
}

// consistent reads o from the datastore.
func (c *Collector) consistent(ctx context.Context, o object) (metav1.Object, error) {
	return c.read(ctx, o, "")
}

func (c *Collector) read(ctx context.Context, o object, rv string) (metav1.Object, error) {
	s := c.config.Storage.StorageFor(o.plane, o.resource)
	if s == nil {
		// Custom resources not served since the start: the API builds
		// their storage.
		return c.readThroughAPI(ctx, o)
	}
	key := s.ResourcePrefix() + "/" + o.name
	if o.namespace != "" {
		key = s.ResourcePrefix() + "/" + o.namespace + "/" + o.name
	}
	obj := s.New()
	if err := s.Get(ctx, key, storage.GetOptions{ResourceVersion: rv}, obj); err != nil {
		if storage.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return meta.Accessor(obj)
}

func (c *Collector) readThroughAPI(ctx context.Context, o object) (metav1.Object, error) {
	gvr, err := c.gvr(ctx, o)
	if err != nil {
		return nil, err
	}
	obj, err := c.client.Resource(gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && !lifecycle.Refused(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return obj, nil
}

func (c *Collector) gvr(ctx context.Context, o object) (schema.GroupVersionResource, error) {
	version, ok := c.config.Resolver.Version(ctx, o.plane, o.resource)
	if !ok {
		return schema.GroupVersionResource{}, fmt.Errorf("plane %s does not serve %s", o.plane, o.resource)
	}
	return o.resource.WithVersion(version), nil
}

// delete deletes the version of o the decision was made on (decided). If o
// has changed since, the deletion conflicts: o is read again and, when its
// owners are what the decision saw, deleted whatever else changed (as
// upstream does, so that frequent unrelated updates cannot starve the
// collector); otherwise it is returned to be decided again.
func (c *Collector) delete(ctx context.Context, o object, decided metav1.Object, policy metav1.DeletionPropagation) (metav1.Object, error) {
	err := c.deleteAt(ctx, o, decided.GetResourceVersion(), policy)
	if !apierrors.IsConflict(err) || lifecycle.Refused(err) {
		return nil, ignoreNotFound(err)
	}
	live, err := c.consistent(ctx, o)
	if err != nil || live == nil || live.GetUID() != o.uid {
		// Gone, or a new object of the same name: not ours.
		return nil, err
	}
	if !equality.Semantic.DeepEqual(live.GetOwnerReferences(), decided.GetOwnerReferences()) {
		return live, nil
	}
	return nil, ignoreNotFound(ignoreConflict(c.deleteAt(ctx, o, "", policy)))
}

// deleteAt deletes o if it still has its uid and, unless empty,
// resourceVersion.
func (c *Collector) deleteAt(ctx context.Context, o object, resourceVersion string, policy metav1.DeletionPropagation) error {
	gvr, err := c.gvr(ctx, o)
	if err != nil {
		return err
	}
	logrus.WithFields(logrus.Fields{"plane": o.plane, "resource": o.resource.String(), "namespace": o.namespace,
		"name": o.name, "resourceVersion": resourceVersion, "propagation": policy}).Debug("garbage collector deletes")
	preconditions := &metav1.Preconditions{UID: &o.uid}
	if resourceVersion != "" {
		preconditions.ResourceVersion = &resourceVersion
	}
	return c.client.Resource(gvr).Namespace(o.namespace).Delete(ctx, o.name, metav1.DeleteOptions{
		Preconditions: preconditions, PropagationPolicy: &policy,
	})
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) && !lifecycle.Refused(err) {
		return nil
	}
	return err
}

// ignoreConflict: a conflict left after a uid-only precondition means a new
// object of the same name, not ours.
func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) && !lifecycle.Refused(err) {
		return nil
	}
	return err
}

// removeOwnerRefs drops the references to owners from o, guarded by o's
// resourceVersion so that a concurrent change is never overwritten.
func (c *Collector) removeOwnerRefs(ctx context.Context, o object, owners []types.UID) error {
	_, err := c.patchMeta(ctx, o, "", func(m *metav1.PartialObjectMetadata) (any, bool) {
		kept := slices.DeleteFunc(slices.Clone(m.OwnerReferences), func(r metav1.OwnerReference) bool {
			return slices.Contains(owners, r.UID)
		})
		if len(kept) == len(m.OwnerReferences) {
			return nil, false
		}
		if kept == nil {
			kept = []metav1.OwnerReference{}
		}
		return map[string]any{"ownerReferences": kept}, true
	})
	return err
}

// unblockOwnerRefs makes every reference of o non-blocking, if o is still
// at resourceVersion, and returns o as patched (nil when there was nothing
// to change).
func (c *Collector) unblockOwnerRefs(ctx context.Context, o object, resourceVersion string) (*metav1.PartialObjectMetadata, error) {
	return c.patchMeta(ctx, o, resourceVersion, func(m *metav1.PartialObjectMetadata) (any, bool) {
		refs := slices.Clone(m.OwnerReferences)
		changed := false
		for i := range refs {
			if refs[i].BlockOwnerDeletion != nil && *refs[i].BlockOwnerDeletion {
				refs[i].BlockOwnerDeletion = ptr.To(false)
				changed = true
			}
		}
		return map[string]any{"ownerReferences": refs}, changed
	})
}

func (c *Collector) removeFinalizer(ctx context.Context, o object, finalizer string) error {
	_, err := c.patchMeta(ctx, o, "", func(m *metav1.PartialObjectMetadata) (any, bool) {
		if !slices.Contains(m.Finalizers, finalizer) {
			return nil, false
		}
		kept := slices.DeleteFunc(slices.Clone(m.Finalizers), func(f string) bool { return f == finalizer })
		if kept == nil {
			kept = []string{}
		}
		return map[string]any{"finalizers": kept}, true
	})
	return err
}

// patchMeta reads o's metadata and merges change into it, guarded by the
// resourceVersion it read. With pinned set, o must still be at that
// resourceVersion (else a conflict is returned); without, conflicts are
// retried a few times before the item goes back to the queue. It returns o
// as patched, or nil when change had nothing to do.
func (c *Collector) patchMeta(ctx context.Context, o object, pinned string, change func(*metav1.PartialObjectMetadata) (any, bool)) (*metav1.PartialObjectMetadata, error) {
	gvr, err := c.gvr(ctx, o)
	if err != nil {
		return nil, err
	}
	client := c.client.Resource(gvr).Namespace(o.namespace)
	for range 3 {
		current, err := client.Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if current.UID != o.uid {
			return nil, nil
		}
		if pinned != "" && current.ResourceVersion != pinned {
			return nil, apierrors.NewConflict(o.resource, o.name, fmt.Errorf("changed since resourceVersion %s", pinned))
		}
		fields, ok := change(current)
		if !ok {
			return nil, nil
		}
		md := fields.(map[string]any)
		md["resourceVersion"] = current.ResourceVersion
		patch, err := json.Marshal(map[string]any{"metadata": md})
		if err != nil {
			return nil, err
		}
		patched, err := client.Patch(ctx, o.name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil || !apierrors.IsConflict(err) || lifecycle.Refused(err) || pinned != "" {
			return patched, err
		}
	}
	return nil, fmt.Errorf("%s %s/%s kept changing", o.resource, o.namespace, o.name)
}
