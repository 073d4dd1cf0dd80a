package fleet

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"kplane.dev/kplane/planes/lifecycle"
)

// Config is what the controller works with.
type Config struct {
	// Loopback reaches the root plane as the server (system:masters).
	Loopback *rest.Config
	// Planes is the informer of Plane objects (shared with the plane
	// lifecycle manager, which runs it). It must not be started yet: New
	// adds an index to it.
	Planes cache.SharedIndexInformer
	// Parallelism bounds the API calls one reconcile has in flight
	// (deletes, label changes, readyz probes), and the members provisioned
	// at once across all Fleets.
	Parallelism int
	// Workers is the number of Fleets reconciled at once.
	Workers int
}

// byFleet indexes Planes by the Fleet that owns them.
const byFleet = "kplane.dev/fleet"

// eventDelay gathers the Plane events of one Fleet into one reconcile.
const eventDelay = 50 * time.Millisecond

// createdMemory is how long a Plane this controller created is taken as
// existing before the informer shows it.
const createdMemory = 30 * time.Second

// Controller keeps Fleets.
type Controller struct {
	config  Config
	fleets  dynamic.NamespaceableResourceInterface
	planes  dynamic.NamespaceableResourceInterface
	probe   *http.Client
	probeTo string

	fleetInformer cache.SharedIndexInformer
	// planeEvents is the controller's handler on the shared Plane
	// informer, removed when Run returns.
	planeEvents cache.ResourceEventHandlerRegistration
	queue       workqueue.TypedRateLimitingInterface[string]
	// provisions holds the members to create, in the order asked; its
	// workers create and bootstrap them while reconciles go on.
	provisions workqueue.TypedInterface[member]

	mu sync.Mutex
	// state holds what the controller remembers of each Fleet between
	// reconciles; everything else is read from the API.
	state map[string]*fleetState
	// contested maps a plane to the Fleets that ask for it while another
	// Fleet owns it, so that they are told when it is let go.
	contested map[string]map[string]struct{}
	// readyz holds the UIDs of Planes whose readyz answered ok: a plane
	// does not stop being ready until it is deleted.
	readyz map[types.UID]struct{}
}

// member is one plane of one Fleet.
type member struct{ fleet, plane, template string }

// fleetState is the controller's memory of one Fleet.
type fleetState struct {
	lastStatusWrite time.Time
	// provisioning holds the members queued or being created.
	provisioning map[string]struct{}
	// created holds the members created recently, until the informer
	// shows them.
	created map[string]time.Time
	// contested is the members another Fleet owns.
	contested map[string]struct{}
	// createError is the last failed create; creates wait until retryAt.
	createError   string
	createFailed  bool // the error is the caller's to fix (4xx), not transient
	retryAt       time.Time
	createBackoff time.Duration
}

// IndexPlanes adds the index of Planes by Fleet the controller reads to
// the Plane informer, before it starts; once per informer.
func IndexPlanes(planes cache.SharedIndexInformer) error {
	if err := planes.AddIndexers(cache.Indexers{byFleet: func(obj any) ([]string, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if owner := ownerOf(u); owner != "" {
				return []string{owner}, nil
			}
		}
		return nil, nil
	}}); err != nil {
		return fmt.Errorf("indexing Planes by Fleet: %w", err)
	}
	return nil
}

// New returns a controller; Run starts it. A controller runs once: one
// server of those sharing a datastore keeps the Fleets at a time, with a
// controller of its own for each time it does (New again), so that what
// one remembered never outlives its term.
func New(config Config) (*Controller, error) {
	if config.Parallelism <= 0 {
		config.Parallelism = 16
	}
	if config.Workers <= 0 {
		config.Workers = 2
	}
	client, err := dynamic.NewForConfig(config.Loopback)
	if err != nil {
		return nil, err
	}
	probe, err := rest.HTTPClientFor(config.Loopback)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		config:    config,
		fleets:    client.Resource(GVR),
		planes:    client.Resource(lifecycle.GVR),
		probe:     probe,
		probeTo:   config.Loopback.Host,
		state:     map[string]*fleetState{},
		contested: map[string]map[string]struct{}{},
		readyz:    map[types.UID]struct{}{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
				&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(50), 100)},
			),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kplane_fleets"}),
		provisions: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[member]{Name: "kplane_fleet_members"}),
	}
	c.planeEvents, err = config.Planes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.planeChanged(nil, obj) },
		UpdateFunc: func(old, obj any) { c.planeChanged(old, obj) },
		DeleteFunc: c.planeDeleted,
	})
	if err != nil {
		return nil, err
	}
	c.fleetInformer = dynamicinformer.NewDynamicSharedInformerFactory(client, 0).ForResource(GVR).Informer()
	if _, err := c.fleetInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.fleetChanged(nil, obj) },
		UpdateFunc: c.fleetChanged,
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				c.queue.Add(u.GetName())
			}
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// HasSynced reports whether every stored Fleet and Plane is known.
func (c *Controller) HasSynced() bool {
	return c.fleetInformer.HasSynced() && c.config.Planes.HasSynced()
}

// Run keeps the Fleets until ctx is done. The Plane informer is run by its
// owner.
func (c *Controller) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	defer c.provisions.ShutDown()
	defer func() {
		if err := c.config.Planes.RemoveEventHandler(c.planeEvents); err != nil {
			logrus.WithError(err).Warn("fleet controller: removing its Plane handler")
		}
	}()
	if err := c.waitForFleetsServed(ctx); err != nil {
		return
	}
	go c.fleetInformer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.HasSynced) {
		return
	}
	for i := 0; i < c.config.Workers; i++ {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	for i := 0; i < c.config.Parallelism; i++ {
		go wait.UntilWithContext(ctx, c.provisioner, time.Second)
	}
	<-ctx.Done()
}

// waitForFleetsServed returns once the root plane serves Fleets. Their
// CRD is established by the same term that runs this controller, just
// after a server starts: an informer started before would log a failed
// LIST and retry only after its reflector's back-off (about a second).
func (c *Controller) waitForFleetsServed(ctx context.Context) error {
	backoff := wait.Backoff{Duration: 10 * time.Millisecond, Factor: 1.5, Cap: 500 * time.Millisecond, Steps: math.MaxInt32}
	return wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		_, err := c.fleets.List(ctx, metav1.ListOptions{Limit: 1})
		// Any other error is the informer's to retry and report.
		return !apierrors.IsNotFound(err), nil
	})
}

// fleetChanged queues a Fleet when something a reconcile acts on changed;
// status writes (the controller's own) do not.
func (c *Controller) fleetChanged(old, obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	if prev, ok := old.(*unstructured.Unstructured); ok &&
		prev.GetGeneration() == u.GetGeneration() &&
		(prev.GetDeletionTimestamp() == nil) == (u.GetDeletionTimestamp() == nil) &&
		len(prev.GetFinalizers()) == len(u.GetFinalizers()) {
		return
	}
	c.queue.Add(u.GetName())
}

// planeChanged queues the Fleets a Plane event concerns: its owner before
// and after, and the Fleets waiting for it.
func (c *Controller) planeChanged(old, obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	owner := ownerOf(u)
	if owner != "" {
		c.queue.AddAfter(owner, eventDelay)
	}
	if prev, ok := old.(*unstructured.Unstructured); ok {
		if before := ownerOf(prev); before != "" && before != owner {
			c.queue.AddAfter(before, eventDelay)
		}
	}
	c.queueContenders(u.GetName())
}

func (c *Controller) planeDeleted(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	owner := ownerOf(u)
	c.mu.Lock()
	delete(c.readyz, u.GetUID())
	if s := c.state[owner]; s != nil {
		delete(s.created, u.GetName())
	}
	c.mu.Unlock()
	if owner != "" {
		c.queue.AddAfter(owner, eventDelay)
	}
	c.queueContenders(u.GetName())
}

// ownerOf is the Fleet a Plane belongs to, "" for none. It reads the label
// in place: GetLabels copies every label of every Plane a reconcile looks at.
func ownerOf(p *unstructured.Unstructured) string {
	owner, _, _ := unstructured.NestedString(p.Object, "metadata", "labels", Label)
	return owner
}

func (c *Controller) queueContenders(plane string) {
	c.mu.Lock()
	var fleets []string
	for f := range c.contested[plane] {
		fleets = append(fleets, f)
	}
	c.mu.Unlock()
	for _, f := range fleets {
		c.queue.AddAfter(f, eventDelay)
	}
}

func (c *Controller) worker(ctx context.Context) {
	for {
		name, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		after, err := c.reconcile(ctx, name)
		switch {
		case err != nil:
			logrus.WithError(err).WithField("fleet", name).Warn("reconciling Fleet, retrying")
			c.queue.AddRateLimited(name)
		case after > 0:
			c.queue.Forget(name)
			c.queue.AddAfter(name, after)
		default:
			c.queue.Forget(name)
		}
		c.queue.Done(name)
	}
}

// fleetState returns the memory of a Fleet; callers hold c.mu.
func (c *Controller) fleetState(name string) *fleetState {
	s := c.state[name]
	if s == nil {
		s = &fleetState{provisioning: map[string]struct{}{}, created: map[string]time.Time{}, contested: map[string]struct{}{}}
		c.state[name] = s
	}
	return s
}

// forget drops the memory of a Fleet that no longer exists. Members
// still queued for it are dropped by the provisioner.
func (c *Controller) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.state[name]; s != nil {
		c.setContested(name, s, nil)
	}
	delete(c.state, name)
}

// setContested records which members of a Fleet another Fleet owns;
// callers hold c.mu.
func (c *Controller) setContested(fleet string, s *fleetState, planes map[string]struct{}) {
	for p := range s.contested {
		if _, still := planes[p]; still {
			continue
		}
		delete(c.contested[p], fleet)
		if len(c.contested[p]) == 0 {
			delete(c.contested, p)
		}
	}
	for p := range planes {
		if c.contested[p] == nil {
			c.contested[p] = map[string]struct{}{}
		}
		c.contested[p][fleet] = struct{}{}
	}
	if planes == nil {
		planes = map[string]struct{}{}
	}
	s.contested = planes
}
