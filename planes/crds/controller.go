package crds

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/util/workqueue"

	"kplane.dev/kplane/planes"
)

// cleanupFinalizer is the upstream finalizer every CRD gets on creation.
const cleanupFinalizer = "customresourcecleanup.apiextensions.k8s.io"

type crdKey struct{ plane, name string }

// Controller keeps, in every plane, the CRD conditions upstream's naming,
// establishing and finalizing controllers keep in one cluster: one queue
// for all planes, keyed by plane and CRD name.
type Controller struct {
	s *Server
	// queue is the running term's (run), nil while this server does not
	// keep the conditions: the index still follows every CRD.
	queue atomic.Pointer[crdQueue]
}

// crdQueue is one term's queue.
type crdQueue struct {
	workqueue.TypedRateLimitingInterface[crdKey]
}

func newController(s *Server) *Controller {
	return &Controller{s: s}
}

// enqueueGroupOf queues a changed CRD and every CRD of its group in its
// plane: whether their names are accepted depends on each other.
func (c *Controller) enqueueGroupOf(plane, name string) {
	q := c.queue.Load()
	if q == nil {
		return
	}
	q.Add(crdKey{plane, name})
	_, group, _ := strings.Cut(name, ".")
	entries, _ := c.s.index.List(plane)
	for _, e := range entries {
		if e.crd.Spec.Group == group && e.crd.Name != name {
			q.Add(crdKey{plane, e.crd.Name})
		}
	}
}

// run keeps the conditions until ctx is done; it can run again after it
// returned, and then looks at every CRD anew.
func (c *Controller) run(ctx context.Context) {
	select {
	case <-c.s.index.HasSynced():
	case <-ctx.Done():
		return
	}
	q := &crdQueue{workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[crdKey](),
		workqueue.TypedRateLimitingQueueConfig[crdKey]{Name: "kplane_crd_conditions"})}
	c.queue.Store(q)
	for _, key := range c.s.index.ownKeys() {
		q.Add(key)
	}
	var workers sync.WaitGroup
	for i := 0; i < 2; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			c.worker(ctx, q)
		}()
	}
	<-ctx.Done()
	c.queue.CompareAndSwap(q, nil)
	q.ShutDown()
	workers.Wait()
}

func (c *Controller) worker(ctx context.Context, q *crdQueue) {
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		requeueAfter, err := c.safeSync(ctx, key)
		switch {
		case err != nil:
			log := logrus.WithError(err).WithFields(logrus.Fields{"plane": key.plane, "crd": key.name})
			if q.NumRequeues(key) > 5 {
				log.Warn("CRD sync keeps failing, retrying")
			} else {
				log.Debug("CRD sync failed, retrying")
			}
			if ctx.Err() == nil {
				q.AddRateLimited(key)
			}
		case requeueAfter > 0:
			q.Forget(key)
			q.AddAfter(key, requeueAfter)
		default:
			q.Forget(key)
		}
		q.Done(key)
	}
}

// safeSync is sync that turns a panic into an error: a bad object in one
// plane must never take the server (and every other plane) down.
func (c *Controller) safeSync(ctx context.Context, key crdKey) (after time.Duration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return c.sync(ctx, key)
}

func (c *Controller) sync(ctx context.Context, key crdKey) (time.Duration, error) {
	// Conditions and finalizers of the plane's own CRDs only: inherited
	// ones are kept by their template.
	e, ok := c.s.index.getOwn(key.plane, key.name)
	if !ok {
		return 0, nil
	}
	if e.crd.DeletionTimestamp != nil {
		return c.finalize(ctx, e)
	}
	entries, _ := c.s.index.List(key.plane)
	desired := e.crd.DeepCopy()
	if c.s.config.BuiltinGroups.Has(desired.Spec.Group) {
		refuseBuiltinGroup(desired)
	} else {
		acceptNames(desired, entries)
	}
	if equality.Semantic.DeepEqual(desired.Status, e.crd.Status) {
		return 0, nil
	}
	return 0, c.updateStatus(ctx, key.plane, desired)
}

// acceptNames sets NamesAccepted (and Established, once the served copy
// has its names accepted) on crd: its requested names are accepted unless another CRD of
// the same group in the plane already holds one of them.
func acceptNames(crd *apiextensionsv1.CustomResourceDefinition, others []*entry) {
	requested := crd.Spec.Names
	var conflict, reason string
	for _, other := range others {
		o := other.crd
		if o.Name == crd.Name || o.Spec.Group != crd.Spec.Group {
			continue
		}
		held := o.Status.AcceptedNames
		if held.Plural == "" {
			continue
		}
		taken := sets.New(held.Plural, held.Singular)
		taken.Insert(held.ShortNames...)
		switch {
		case taken.Has(requested.Plural):
			conflict, reason = fmt.Sprintf("%q is already in use", requested.Plural), "PluralConflict"
		case requested.Singular != "" && taken.Has(requested.Singular):
			conflict, reason = fmt.Sprintf("%q is already in use", requested.Singular), "SingularConflict"
		case taken.HasAny(requested.ShortNames...):
			conflict, reason = fmt.Sprintf("%q is already in use", sets.List(taken.Intersection(sets.New(requested.ShortNames...)))), "ShortNamesConflict"
		case held.Kind == requested.Kind:
			conflict, reason = fmt.Sprintf("%q is already in use", requested.Kind), "KindConflict"
		case requested.ListKind != "" && held.ListKind == requested.ListKind:
			conflict, reason = fmt.Sprintf("%q is already in use", requested.ListKind), "ListKindConflict"
		}
		if conflict != "" {
			break
		}
	}
	if conflict != "" {
		apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionFalse, Reason: reason, Message: conflict})
		if !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
			apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
				Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse, Reason: "NotAccepted", Message: "not all names are accepted"})
		}
		return
	}
	accepted := apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted)
	crd.Status.AcceptedNames = requested
	apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts", Message: "no conflicts found"})
	// Established only once the index (which serves the resource) holds the
	// accepted names: a client that waits for Established and then creates
	// a custom resource must never get a 404. The first write comes back
	// through the index and queues the CRD again, as upstream's naming
	// controller hands over to its establishing controller.
	if accepted && !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
		apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"})
	}
}

// refuseBuiltinGroup marks a CRD in a built-in group, stored before
// admission refused them, as never served: it can only be deleted.
func refuseBuiltinGroup(crd *apiextensionsv1.CustomResourceDefinition) {
	msg := fmt.Sprintf("group %q is served by the built-in API", crd.Spec.Group)
	apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionFalse, Reason: "BuiltinGroup", Message: msg})
	apihelpers.SetCRDCondition(crd, apiextensionsv1.CustomResourceDefinitionCondition{
		Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse, Reason: "BuiltinGroup", Message: msg})
}

// finalize deletes every custom resource of the CRD in its plane, then
// releases the CRD.
func (c *Controller) finalize(ctx context.Context, e *entry) (time.Duration, error) {
	crd := e.crd
	if !sets.New(crd.Finalizers...).Has(cleanupFinalizer) {
		return 0, nil
	}
	if !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Terminating) {
		desired := crd.DeepCopy()
		apihelpers.SetCRDCondition(desired, apiextensionsv1.CustomResourceDefinitionCondition{
			Type: apiextensionsv1.Terminating, Status: apiextensionsv1.ConditionTrue,
			Reason: "InstanceDeletionInProgress", Message: "CustomResource deletion is in progress"})
		// The update comes back through the index and queues the CRD again.
		return 0, c.updateStatus(ctx, e.plane, desired)
	}
	if apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
		remaining, err := c.deleteInstances(ctx, e)
		if err != nil {
			return 0, err
		}
		if remaining > 0 {
			// Instances with finalizers of their own: wait for them.
			return 2 * time.Second, nil
		}
	}
	return 0, c.removeFinalizer(ctx, e)
}

func (c *Controller) deleteInstances(ctx context.Context, e *entry) (int, error) {
	storage, err := c.s.handlers.storage(e)
	if err != nil {
		return 0, err
	}
	list, err := storage.List(internalContext(ctx, e.plane, e.crd.Spec.Group, e.crd.Spec.Names.Plural, "list", ""), &metainternalversion.ListOptions{})
	if err != nil {
		return 0, err
	}
	// DeleteCollection works one namespace at a time.
	namespaces := sets.New[string]()
	_ = meta.EachListItem(list, func(obj runtime.Object) error {
		if accessor, err := meta.Accessor(obj); err == nil {
			namespaces.Insert(accessor.GetNamespace())
		}
		return nil
	})
	for ns := range namespaces {
		pctx := genericapirequest.WithNamespace(internalContext(ctx, e.plane, e.crd.Spec.Group, e.crd.Spec.Names.Plural, "deletecollection", ""), ns)
		if _, err := storage.DeleteCollection(pctx, rest.ValidateAllObjectFunc, &metav1.DeleteOptions{}, &metainternalversion.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("deleting instances of %s: %w", e.crd.Name, err)
		}
	}
	if len(namespaces) == 0 {
		return 0, nil
	}
	list, err = storage.List(internalContext(ctx, e.plane, e.crd.Spec.Group, e.crd.Spec.Names.Plural, "list", ""), &metainternalversion.ListOptions{})
	if err != nil {
		return 0, err
	}
	return meta.LenList(list), nil
}

func (c *Controller) removeFinalizer(ctx context.Context, e *entry) error {
	pctx := internalContext(ctx, e.plane, apiextensionsv1.GroupName, "customresourcedefinitions", "update", e.crd.Name)
	_, _, err := c.s.config.CRDs.Update(pctx, e.crd.Name, rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, oldObj runtime.Object) (runtime.Object, error) {
		crd := oldObj.DeepCopyObject().(*apiextensionsinternal.CustomResourceDefinition)
		var kept []string
		for _, f := range crd.Finalizers {
			if f != cleanupFinalizer {
				kept = append(kept, f)
			}
		}
		crd.Finalizers = kept
		return crd, nil
	}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (c *Controller) updateStatus(ctx context.Context, plane string, desired *apiextensionsv1.CustomResourceDefinition) error {
	internal := &apiextensionsinternal.CustomResourceDefinition{}
	if err := apiextensionsapiserver.Scheme.Convert(desired, internal, nil); err != nil {
		return err
	}
	// The plane annotation is server-owned and re-stamped by storage.
	delete(internal.Annotations, planes.Annotation)
	pctx := internalContext(ctx, plane, apiextensionsv1.GroupName, "customresourcedefinitions", "update", desired.Name)
	_, _, err := c.s.config.CRDStatus.Update(pctx, desired.Name, rest.DefaultUpdatedObjectInfo(internal),
		rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone, or changed meanwhile: the newer version is queued already.
		return nil
	}
	return err
}

// internalContext is the context of a request the server makes to itself
// in plane: what the API handler would have put there.
func internalContext(ctx context.Context, plane, group, resource, verb, name string) context.Context {
	ctx = planes.WithPlane(ctx, plane)
	ctx = genericapirequest.WithNamespace(ctx, "")
	return genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: verb, APIGroup: group, APIVersion: "v1", Resource: resource, Name: name,
	})
}
