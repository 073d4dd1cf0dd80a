package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/limits"
	planestorage "kplane.dev/kplane/planes/storage"
)

// Finalizer holds a Plane until every object of its plane is deleted.
const Finalizer = "kplane.dev/plane-cleanup"

// drainTimeout bounds how long a plane deletion waits for the requests in
// flight in that plane; the server ends any request after a minute.
const drainTimeout = 70 * time.Second

// CreatedByAnnotation records who brought a plane into being by using it.
const CreatedByAnnotation = "kplane.dev/created-by"

// GVR is the Plane resource, in the root plane.
var GVR = schema.GroupVersionResource{Group: "kplane.dev", Version: "v1", Resource: "planes"}

// Phase is where a plane is in its life.
type Phase string

const (
	Pending     Phase = "Pending"
	Ready       Phase = "Ready"
	Terminating Phase = "Terminating"
)

// Bootstrapper writes the objects every plane starts with.
type Bootstrapper interface {
	Ensure(ctx context.Context, plane string) error
	Forget(plane string)
	// BaseID is the base plane new planes made from nothing are layers
	// over; Ensure of it writes the bootstrap objects there.
	BaseID() string
	// Known reports whether this process has bootstrapped plane.
	Known(plane string) bool
}

// Forgetter drops what a component keeps for a deleted plane.
type Forgetter interface {
	ForgetPlane(plane string)
}

// Config is what the manager works with.
type Config struct {
	// Loopback reaches the root plane as the server (system:masters).
	Loopback     *rest.Config
	Bootstrapper Bootstrapper
	Authorizer   authorizer.Authorizer
	// Storage holds every resource's plane-scoped storage.
	Storage *planestorage.Registry
	// Counts follows the number of objects per plane.
	Counts *planestorage.Counts
	// CustomResources builds the storage of a plane's CRDs before the plane
	// is wiped (they may not be served since the last restart).
	CustomResources interface {
		EnsureStorages(ctx context.Context, plane string) error
	}
	// Forget is told about every deleted plane.
	Forget []Forgetter
	// StatusInterval is how often object counts are written to status.
	StatusInterval time.Duration
	// MaxPlanesPerUser caps the planes one identity brings into being by
	// first requests (0: no limit).
	MaxPlanesPerUser int
	// CopyBootstrap makes new planes made from nothing write their own
	// copy of the bootstrap objects instead of standing on the base plane.
	CopyBootstrap bool
	// ServerName names this server among those sharing the datastore, in
	// the reset marks it writes.
	ServerName string
	// SoleServer says no other server can share the datastore (SQLite):
	// no presence to keep, no other server to wait for.
	SoleServer bool
	// DeleteRecords, when set, deletes many records of the datastore in
	// one write, each only if it is still at its revision, all or none
	// (false: one had changed), and returns the revision of each
	// deletion; wipes use it. Nil: records are deleted one by one through
	// their storages.
	DeleteRecords func(ctx context.Context, records []DatastoreRecord) ([]int64, bool, error)
}

// state is what the manager knows of one plane.
type state struct {
	phase       Phase
	uid         types.UID
	terminating bool
	// wiped is the UID of the Plane whose objects are all deleted: a
	// reconcile that sees the same Plane again (its informer copy still
	// holding the finalizer) only releases it.
	wiped types.UID
	// template is the plane this one is made from (spec.template).
	template string
	// resetting is set while a reset of the plane runs (or must be
	// finished after a restart); requests wait for it.
	resetting bool
	// resetDoneAt is the resourceVersion of the Plane whose reset mark was
	// removed last: an informer's older copy still carries the mark and
	// must not start the reset again.
	resetDoneAt uint64
	// resetRun is set while finishReset runs for the plane: one at a
	// time, and a second caller waits for the first to end.
	resetRun *resetRun
	// heldForMarkAt is the resourceVersion of the marked Plane that made
	// this server hold the plane for a reset it did not begin (0: none):
	// the mark's removal releases the hold.
	heldForMarkAt uint64
	// toldHeldAt is the heldForMarkAt this server started telling the
	// resetting server about; toldDeleting is set once it started
	// draining the plane for its deletion. Both start only once the
	// manager runs (a plane loaded by a request before is told about at
	// the informer's look at it).
	toldHeldAt   uint64
	toldDeleting bool
	// resetRevision is the datastore revision of the plane's last reset
	// (ResetRevisionAnnotation).
	resetRevision uint64
	// from is the plane this one was cloned from (spec.from); cloned is set
	// once this process copied it.
	from   string
	cloned bool
	// base is the base plane (planes.BaseAnnotation) the plane stands on
	// when it has no template.
	base string
	// limits is the Plane's spec.limits.
	limits *limits.Limits
	// createdBy is the user whose first request made the plane.
	createdBy string
	// usage is what the Plane's status reports of its usage, and since when.
	usage usageReport
}

// Manager keeps the planes.
type Manager struct {
	config   Config
	planes   dynamic.NamespaceableResourceInterface
	informer cache.SharedIndexInformer
	// observed is done once the informer's handler saw every listed Plane.
	observed cache.DoneChecker
	// queue is the reconcile queue of the running term (RunControllers),
	// nil while this server does not run the lifecycle: Planes are then
	// only observed (phases, templates, limits) to serve requests.
	queue    atomic.Pointer[planeQueue]
	requests *tracker

	mu    sync.RWMutex
	state map[string]*state
	// dependents indexes state by template: the planes made from each.
	dependents map[string]map[string]struct{}
	// held are the planes held for a reset.
	held map[string]*resetHold
	// clones shares one clone among the requests waiting for it.
	clones singleflight.Group
	// loads shares one read of a Plane among the requests that load it
	// before every Plane is known (Load).
	loads singleflight.Group
	// loaded are the Planes Load read, until every Plane is known (Run
	// drops them then: the informer holds them all).
	loaded map[string]*unstructured.Unstructured
	// provisioning counts, per user, first requests creating a plane.
	provisioning map[string]map[string]int
	// inheritanceChanged is told of planes whose Inherits may have changed.
	inheritanceChanged atomic.Pointer[func(plane string)]
	// resetFollowers is waited for before a reset lets requests in.
	resetFollowers atomic.Pointer[func(ctx context.Context, upTo map[*planestorage.Store]int64)]
	// client reaches the root plane (Planes, presence Leases).
	client dynamic.Interface
	// running is Run's context, for the work observe starts.
	running atomic.Pointer[context.Context]
}

// New returns a manager; Run starts it.
func New(config Config) (*Manager, error) {
	client, err := dynamic.NewForConfig(config.Loopback)
	if err != nil {
		return nil, err
	}
	if config.StatusInterval == 0 {
		config.StatusInterval = 10 * time.Second
	}
	m := &Manager{
		config:       config,
		planes:       client.Resource(GVR),
		client:       client,
		requests:     newTracker(),
		state:        map[string]*state{planes.Root: {phase: Ready}},
		dependents:   map[string]map[string]struct{}{},
		held:         map[string]*resetHold{},
		provisioning: map[string]map[string]int{},
		loaded:       map[string]*unstructured.Unstructured{},
	}
	planesList := &planestorage.PlaneListWatch{Store: m.planesStore, Plane: planes.Root, Trim: withoutManagedFields}
	m.informer = cache.NewSharedIndexInformer(planesList.ListerWatcher(), &unstructured.Unstructured{}, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	observed, err := m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.observe(obj) },
		UpdateFunc: func(_, obj any) { m.observe(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				m.forgetDeleted(u)
				m.enqueue(u.GetName())
			}
		},
	})
	if err != nil {
		return nil, err
	}
	m.observed = observed.HasSyncedChecker()
	return m, nil
}

// withoutManagedFields drops the managedFields of a Plane the informer takes
// from a watch (its own copy; listed Planes are the watch cache's and keep
// theirs). Nothing here reads them, writes of a Plane never start from the
// informer's copy (the API keeps managedFields an update leaves out; the
// lifecycle's own writes start from the storage's), and in a member's
// unstructured Plane they were one of the larger parts of what the server
// holds per plane.
func withoutManagedFields(obj runtime.Object) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetManagedFields(nil)
	}
}

// annotation reads one annotation of u in place: GetAnnotations copies
// them all, and the informer's handler reads several of every Plane, at
// a restart 10,000 of them before the server is ready.
func annotation(u *unstructured.Unstructured, key string) (string, bool) {
	metadata, _ := u.Object["metadata"].(map[string]any)
	annotations, _ := metadata["annotations"].(map[string]any)
	value, ok := annotations[key].(string)
	return value, ok
}

// observe records what a Plane object says and queues it.
func (m *Manager) observe(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	m.mu.RLock()
	old := m.state[u.GetName()]
	replaced := old != nil && old.uid != "" && old.uid != u.GetUID() && old.terminating
	m.mu.RUnlock()
	if replaced {
		// Deleted and created again before the deletion's reconcile forgot
		// the old plane: forget it now, or the new plane would stay closed
		// to requests (409) and inherit the old one's allocations.
		m.forget(u.GetName())
	}
	m.mu.Lock()
	s := m.state[u.GetName()]
	inheritedBefore := inheritsLocked(s)
	if s == nil || s.uid != u.GetUID() {
		s = &state{phase: Pending, uid: u.GetUID()}
		m.state[u.GetName()] = s
	}
	if Phase(phase) == Ready && s.phase == Pending {
		s.phase = Ready
	}
	if u.GetDeletionTimestamp() != nil {
		s.terminating = true
		s.phase = Terminating
	}
	s.from, _, _ = unstructured.NestedString(u.Object, "spec", "from")
	s.base, _ = annotation(u, planes.BaseAnnotation)
	s.createdBy, _ = annotation(u, CreatedByAnnotation)
	s.limits = limits.OfPlane(u)
	s.usage.stored(usageOf(u), time.Now())
	template, _, _ := unstructured.NestedString(u.Object, "spec", "template")
	m.setTemplateLocked(u.GetName(), s, template)
	resetRevision, _ := annotation(u, ResetRevisionAnnotation)
	if at, err := strconv.ParseUint(resetRevision, 10, 64); err == nil && at > s.resetRevision {
		s.resetRevision = at
	}
	holdForReset := m.unfinishedResetLocked(u, s) && !s.resetting && !s.terminating
	if holdForReset {
		// A reset was begun and not finished, by another server or by this
		// one before it stopped: no request may see the half-reset plane
		// until whoever finishes it removes the mark.
		s.resetting = true
		s.heldForMarkAt = resourceVersionOf(u)
	}
	endedElsewhere := m.resetEndedElsewhereLocked(u, s)
	inheritanceChanged := inheritsLocked(s) != inheritedBefore
	running, drain, tellHeld := m.toTellLocked(s)
	m.mu.Unlock()
	if inheritanceChanged {
		m.tellInheritance(u.GetName())
	}
	if drain {
		go m.drainForDeletion(*running, u.GetName(), u.GetUID())
	}
	if holdForReset || tellHeld {
		h := m.holdForReset(u.GetName())
		if tellHeld {
			go m.ackResetHold(*running, u.GetName(), u.GetUID(), u.GetAnnotations()[ResetAnnotation], h.idle)
		}
	}
	if endedElsewhere {
		m.releaseResetHold(u)
	}
	m.enqueue(u.GetName())
}

// toTellLocked decides what the other servers sharing the datastore are
// to be told of plane s, once each: that this server drained it for its
// deletion, that it holds it for another server's reset. Both need the
// running manager (running); a plane loaded by a request before it runs
// is told about at the informer's look at it.
func (m *Manager) toTellLocked(s *state) (running *context.Context, drain, held bool) {
	running = m.running.Load()
	if running == nil || m.config.SoleServer {
		return nil, false, false
	}
	if drain = s.terminating && !s.toldDeleting; drain {
		s.toldDeleting = true
	}
	if held = s.heldForMarkAt != 0 && s.toldHeldAt != s.heldForMarkAt; held {
		s.toldHeldAt = s.heldForMarkAt
	}
	return running, drain, held
}

// forgetDeleted forgets a plane whose Plane is gone, on every server:
// what a server keeps for a plane (phase, allocations, caches) must not
// outlive it wherever the plane's deletion ran.
func (m *Manager) forgetDeleted(u *unstructured.Unstructured) {
	m.mu.RLock()
	s := m.state[u.GetName()]
	same := s != nil && s.uid == u.GetUID()
	m.mu.RUnlock()
	if same && u.GetName() != planes.Root {
		m.forget(u.GetName())
	}
}

// planeQueue is one term's reconcile queue.
type planeQueue struct {
	workqueue.TypedRateLimitingInterface[string]
}

// enqueue queues a plane for the running term, if any.
func (m *Manager) enqueue(name string) {
	if q := m.queue.Load(); q != nil {
		q.Add(name)
	}
}

// setTemplateLocked records which template plane name is made from.
func (m *Manager) setTemplateLocked(name string, s *state, template string) {
	if s.template == template {
		return
	}
	if deps := m.dependents[s.template]; deps != nil {
		delete(deps, name)
		if len(deps) == 0 {
			delete(m.dependents, s.template)
		}
	}
	s.template = template
	if template != "" {
		if m.dependents[template] == nil {
			m.dependents[template] = map[string]struct{}{}
		}
		m.dependents[template][name] = struct{}{}
	}
}

// Template implements planes/storage.Layers: the plane's template, or
// the base plane it stands on.
func (m *Manager) Template(plane string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.state[plane]
	switch {
	case s == nil:
		return "", false
	case s.template != "":
		return s.template, true
	case s.base != "":
		return s.base, true
	}
	return "", false
}

// Inherits returns the template whose objects plane shows as its own
// (spec.template), "" for a plane made from none, the base plane aside,
// and for a plane being deleted: a member's inherited objects leave with
// it, before its own records are wiped.
func (m *Manager) Inherits(plane string) string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return inheritsLocked(m.state[plane])
}

func inheritsLocked(s *state) string {
	if s == nil || s.terminating {
		return ""
	}
	return s.template
}

// OnInheritanceChange makes the manager call f with each plane whose
// Inherits may have changed: made from a template, deleted, forgotten. f
// is called outside the manager's lock and must not block.
func (m *Manager) OnInheritanceChange(f func(plane string)) { m.inheritanceChanged.Store(&f) }

// OnReset makes a reset wait, before it lets the plane's requests in,
// until f returns. f is given the revision of the reset's last deletion
// in each storage it deleted in, and returns once the caches it keeps of
// the watch caches' events (the simulation's informers) have taken them:
// a controller whose write the reset refused decides again from those
// caches, and one that still showed the plane before its reset would
// write that again (the ReplicaSet of the Deployment's template the reset
// undid). f must return when ctx is done.
func (m *Manager) OnReset(f func(ctx context.Context, upTo map[*planestorage.Store]int64)) {
	m.resetFollowers.Store(&f)
}

func (m *Manager) awaitResetFollowers(ctx context.Context, w wiped) {
	if f := m.resetFollowers.Load(); f != nil && len(w.upTo) > 0 {
		(*f)(ctx, w.upTo)
	}
}

func (m *Manager) tellInheritance(plane string) {
	if f := m.inheritanceChanged.Load(); f != nil {
		(*f)(plane)
	}
}

// ResetRevision implements planes/storage.Layers.
func (m *Manager) ResetRevision(plane string) uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if s := m.state[plane]; s != nil {
		return s.resetRevision
	}
	return 0
}

// Dependents implements planes/storage.Layers: the planes made from
// plane. A member whose records are all deleted (its Plane is only waiting
// to be released) no longer holds its template; until then its deletion
// may need the template's CRDs to find its own custom resources.
func (m *Manager) Dependents(plane string) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	deps := m.dependents[plane]
	if len(deps) == 0 {
		return nil
	}
	out := make([]string, 0, len(deps))
	for d := range deps {
		if s := m.state[d]; s == nil || s.wiped == "" || s.wiped != s.uid {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Phase returns the phase of plane, and false if no such plane exists.
func (m *Manager) Phase(plane string) (Phase, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, ok := m.state[plane]
	if !ok {
		return "", false
	}
	return s.phase, true
}

// UID returns the uid of the Plane of plane as the manager knows it (a
// plane provisioned by a request is known before the informer has it),
// and false if no such plane exists. Root's is "root".
func (m *Manager) UID(plane string) (types.UID, bool) {
	if plane == planes.Root {
		return planes.Root, true
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, ok := m.state[plane]
	if !ok {
		return "", false
	}
	return s.uid, true
}

// Exists reports whether plane is known (root included).
func (m *Manager) Exists(plane string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.state[plane]
	return ok
}

// Count is the number of planes (root excluded).
func (m *Manager) Count() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.state) - 1
}

// Phases counts the planes (root excluded) by phase; every phase is
// present, zero or not.
func (m *Manager) Phases() map[Phase]int {
	out := map[Phase]int{Pending: 0, Ready: 0, Terminating: 0}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for name, s := range m.state {
		if name != planes.Root {
			out[s.phase]++
		}
	}
	return out
}

// HasSynced reports whether every stored Plane is known: listed by the
// informer and observed (the planes' state is what requests are routed
// by; the informer's own store is filled before its handler ran).
func (m *Manager) HasSynced() bool {
	select {
	case <-m.observed.Done():
		return true
	default:
		return false
	}
}

// Informer is the manager's informer of Plane objects, for other
// controllers to share; Run runs it. Its Planes are those of the Planes'
// watch cache (planestorage.PlaneListWatch): read them, never modify them.
func (m *Manager) Informer() cache.SharedIndexInformer { return m.informer }

// Run follows the planes until ctx is done: what every server needs to
// serve them (phases, templates, limits, object counts). The work on them
// (provisioning, deletion, reset, status) is RunControllers'.
func (m *Manager) Run(ctx context.Context) {
	m.running.Store(&ctx)
	if !m.config.SoleServer {
		go m.runPresence(ctx)
	}
	go m.informer.RunWithContext(ctx)
	if !cache.WaitFor(ctx, "", m.observed) {
		return
	}
	m.mu.Lock()
	m.loaded = nil
	m.mu.Unlock()
	if err := m.ensureRoot(ctx); err != nil {
		logrus.WithError(err).Error("creating the root Plane")
	}
	m.config.Storage.OnNewStore(func(s *planestorage.Store) { go m.config.Counts.Follow(ctx, s) })
	<-ctx.Done()
}

// RunControllers provisions, deletes and resets planes and writes their
// status until ctx is done; one server of those sharing a datastore runs
// it at a time. It can run again after it returned: every Plane is looked
// at anew, so work a former holder left half done is finished.
func (m *Manager) RunControllers(ctx context.Context) {
	if !cache.WaitFor(ctx, "", m.observed) {
		return
	}
	q := &planeQueue{workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kplane_planes"})}
	m.queue.Store(q)
	// Every Plane, and every plane known without one (deleted while no
	// term ran here).
	for _, name := range m.informer.GetStore().ListKeys() {
		q.Add(name)
	}
	m.mu.RLock()
	for name := range m.state {
		q.Add(name)
	}
	m.mu.RUnlock()
	var workers sync.WaitGroup
	for i := 0; i < 4; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			m.worker(ctx, q)
		}()
	}
	go wait.UntilWithContext(ctx, m.writeCounts, m.config.StatusInterval)
	<-ctx.Done()
	m.queue.CompareAndSwap(q, nil)
	q.ShutDown()
	workers.Wait()
}

// ensureRoot makes the root plane visible as a Plane too.
func (m *Manager) ensureRoot(ctx context.Context) error {
	_, err := m.planes.Create(ctx, planeObject(planes.Root, nil), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func planeObject(name string, annotations map[string]string) *unstructured.Unstructured {
	p := NewPlane(name)
	p.Annotations = annotations
	return p.Unstructured()
}

func (m *Manager) worker(ctx context.Context, q *planeQueue) {
	for {
		name, shutdown := q.Get()
		if shutdown {
			return
		}
		err := m.reconcile(ctx, name)
		var waiting waitingError
		switch {
		case err == nil || ctx.Err() != nil:
			q.Forget(name)
		case errors.As(err, &waiting):
			logrus.WithField("plane", name).Debug(waiting.what)
			q.Forget(name)
			q.AddAfter(name, time.Second)
		default:
			logrus.WithError(err).WithField("plane", name).Warn("reconciling plane, retrying")
			q.AddRateLimited(name)
		}
		q.Done(name)
	}
}

func (m *Manager) reconcile(ctx context.Context, name string) error {
	obj, exists, err := m.informer.GetStore().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		if name == planes.Root {
			return nil
		}
		m.mu.RLock()
		s := m.state[name]
		m.mu.RUnlock()
		if s == nil {
			return nil
		}
		// The informer may not have seen a Plane created a moment ago (by a
		// first request): only the API's word makes a plane gone.
		if _, err := m.planes.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return err
		}
		// Only the plane that was gone: a Plane of the same name created
		// since the read (a deleted plane made again at once) may already
		// be observed, and nothing else would bring its state back for the
		// probes (a plane stored Ready gets no later write).
		m.forgetIf(name, func(now *state) bool { return now == s })
		return nil
	}
	plane := obj.(*unstructured.Unstructured)
	if plane.GetDeletionTimestamp() != nil {
		return m.delete(ctx, plane)
	}
	m.mu.RLock()
	unfinished := m.state[name] != nil && m.unfinishedResetLocked(plane, m.state[name])
	m.mu.RUnlock()
	if unfinished {
		if wait := m.resetLeftTo(plane); wait > 0 {
			// Another server is resetting the plane: finish it only if it
			// has not by then (it died in the middle).
			if q := m.queue.Load(); q != nil {
				q.AddAfter(name, wait)
			}
			return nil
		}
		return m.finishReset(ctx, name, resourceVersionOf(plane))
	}
	phase, _, _ := unstructured.NestedString(plane.Object, "status", "phase")
	if Phase(phase) == Ready {
		return nil
	}
	if err := m.ensure(ctx, name); err != nil {
		return err
	}
	m.setPhase(name, Ready)
	return m.writeStatus(ctx, name, readyStatus(m.config.Counts.Plane(name)))
}

// ReadyAtCreate stores a new Plane Ready when there is nothing to give
// it: made from nothing on a base plane this process has bootstrapped, or
// from a template that is Ready. Its reconcile then has nothing to do, so
// a plane costs one datastore write instead of two (the create and the
// status). A clone, a plane that copies the bootstrap and one whose base
// or template is not ready yet start Pending as before.
func (m *Manager) ReadyAtCreate(plane string, obj runtime.Object) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || plane != planes.Root || u.GetName() == planes.Root || u.GetDeletionTimestamp() != nil {
		return
	}
	if from, _, _ := unstructured.NestedString(u.Object, "spec", "from"); from != "" {
		return
	}
	template, _, _ := unstructured.NestedString(u.Object, "spec", "template")
	switch base := u.GetAnnotations()[planes.BaseAnnotation]; {
	case template != "":
		if phase, exists := m.Phase(template); !exists || phase != Ready {
			return
		}
	case base == "" || !m.config.Bootstrapper.Known(base):
		return
	}
	u.Object["status"] = readyStatus(0)
}

func readyStatus(objects int64) map[string]any {
	return map[string]any{"phase": string(Ready), "bootstrappedAt": time.Now().UTC().Format(time.RFC3339), "objectCount": objects}
}

func (m *Manager) setPhase(name string, phase Phase) {
	m.mu.Lock()
	if s := m.state[name]; s != nil && !s.terminating {
		s.phase = phase
	}
	m.mu.Unlock()
}

// writeStatus merges status into the status of Plane name; a Plane gone
// meanwhile is no error.
func (m *Manager) writeStatus(ctx context.Context, name string, status map[string]any) error {
	_, err := m.updatePlane(ctx, name, func(u *unstructured.Unstructured) { mergeStatus(u, status) })
	if storage.IsNotFound(err) {
		return nil
	}
	return err
}

// forget drops everything kept for a plane that no longer exists.
func (m *Manager) forget(name string) { m.forgetIf(name, func(*state) bool { return true }) }

// forgetIf forgets plane name if what the manager knows of it passes
// which, decided under the manager's lock.
func (m *Manager) forgetIf(name string, which func(*state) bool) {
	m.mu.Lock()
	s, known := m.state[name]
	if known && !which(s) {
		m.mu.Unlock()
		return
	}
	inherited := inheritsLocked(s)
	if known {
		m.setTemplateLocked(name, s, "")
	}
	delete(m.state, name)
	m.mu.Unlock()
	if !known {
		return
	}
	if inherited != "" {
		m.tellInheritance(name)
	}
	m.requests.reopen(name)
	m.config.Bootstrapper.Forget(name)
	m.config.Counts.Forget(name)
	for _, f := range m.config.Forget {
		f.ForgetPlane(name)
	}
}

// Provision brings plane into being for the first request of u, if u may
// create planes. It returns once the plane is bootstrapped.
func (m *Manager) Provision(ctx context.Context, u user.Info, plane string) error {
	decision, _, err := m.config.Authorizer.Authorize(planes.WithPlane(ctx, planes.Root), authorizer.AttributesRecord{
		User: u, Verb: "create", APIGroup: GVR.Group, APIVersion: GVR.Version, Resource: GVR.Resource,
		Name: plane, ResourceRequest: true,
	})
	if err != nil || decision != authorizer.DecisionAllow {
		// The same answer as for any plane that does not exist: a caller
		// who may not create planes learns nothing about them.
		return apierrors.NewNotFound(schema.GroupResource{Group: GVR.Group, Resource: GVR.Resource}, plane)
	}
	// Most often the Plane exists: created a moment ago, its create has
	// answered and the informer has not shown it yet (a client, or a
	// Fleet's provisioner, sends the new plane its first request at once).
	// One read then, not a create refused and a read.
	existing, err := m.readPlane(ctx, plane)
	switch {
	case err == nil:
		// What the Plane says decides how the plane starts (from a
		// template, a clone).
		m.observe(existing)
	case storage.IsNotFound(err) || errors.Is(err, errPlanesNotBuilt):
		if err := m.createForRequest(ctx, u, plane); err != nil {
			return err
		}
	default:
		return err
	}
	if err := m.ensure(ctx, plane); err != nil {
		return err
	}
	m.setPhase(plane, Ready)
	return nil
}

// createForRequest creates the Plane of plane for the first request of u,
// within u's limit of such planes, and observes it (a Plane created
// meanwhile, maybe from a template, as it is) before the reservation ends,
// so that the limit counts it from then on.
func (m *Manager) createForRequest(ctx context.Context, u user.Info, plane string) error {
	name := ""
	if u != nil {
		name = u.GetName()
	}
	release, err := m.reserveForUser(name, plane)
	if err != nil {
		return err
	}
	defer release()
	created, err := m.planes.Create(ctx, planeObject(plane, map[string]string{CreatedByAnnotation: name}), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = m.planes.Get(ctx, plane, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	m.observe(created)
	return nil
}

// ensure gives a new plane what it starts with: its source's state (a
// clone), its template's state (nothing to write) or the bootstrap.
func (m *Manager) ensure(ctx context.Context, plane string) error {
	if source, ok := m.Source(plane); ok {
		return m.clone(ctx, plane, source)
	}
	template, ok := m.Template(plane)
	switch {
	case !ok:
		return m.config.Bootstrapper.Ensure(ctx, plane)
	case planes.IsBase(template):
		// Written once per process, shared by every plane on it.
		return m.config.Bootstrapper.Ensure(ctx, template)
	}
	if phase, exists := m.Phase(template); !exists || phase != Ready {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("plane %s waits for its template %s to be ready", plane, template))
	}
	return nil
}

// delete wipes a plane whose Plane is being deleted, then releases it.
func (m *Manager) delete(ctx context.Context, plane *unstructured.Unstructured) error {
	name := plane.GetName()
	if !hasFinalizer(plane) {
		return nil
	}
	m.mu.Lock()
	if s := m.state[name]; s != nil {
		s.terminating, s.phase = true, Terminating
	}
	m.mu.Unlock()
	phase, _, _ := unstructured.NestedString(plane.Object, "status", "phase")
	if Phase(phase) != Terminating {
		if err := m.writeStatus(ctx, name, map[string]any{"phase": string(Terminating)}); err != nil {
			return err
		}
	}
	m.mu.RLock()
	wiped := m.state[name] != nil && m.state[name].wiped == plane.GetUID()
	m.mu.RUnlock()
	if !wiped {
		waiting, err := m.undrained(ctx, plane)
		if err != nil {
			return err
		}
		if len(waiting) > 0 {
			if time.Since(plane.GetDeletionTimestamp().Time) < drainTimeout {
				return waitingError{fmt.Sprintf("deleting plane %s waits for servers %s to finish its requests", name, describeServers(waiting))}
			}
			logrus.WithField("plane", name).Warnf("servers %s did not say they finished the plane's requests within %s; deleting its objects anyway",
				describeServers(waiting), drainTimeout)
		}
		began := time.Now()
		closed, drained := m.requests.close(name)
		if !awaitDrained(ctx, name, drained, "deleting the plane's objects anyway") {
			return ctx.Err()
		}
		deleted, err := m.wipe(ctx, name)
		if err != nil {
			return err
		}
		m.config.Storage.ForgetWrites(name)
		m.config.Bootstrapper.Forget(name)
		m.mu.Lock()
		if s := m.state[name]; s != nil {
			s.wiped = plane.GetUID()
		}
		m.mu.Unlock()
		logrus.WithFields(logrus.Fields{"plane": name, "objects": deleted, "requestsClosed": closed,
			"took": time.Since(began).Round(time.Millisecond).String()}).Info("plane deleted")
	}
	return m.removeFinalizer(ctx, plane)
}

func hasFinalizer(u *unstructured.Unstructured) bool {
	for _, f := range u.GetFinalizers() {
		if f == Finalizer {
			return true
		}
	}
	return false
}

func (m *Manager) removeFinalizer(ctx context.Context, plane *unstructured.Unstructured) error {
	var kept []string
	for _, f := range plane.GetFinalizers() {
		if f != Finalizer {
			kept = append(kept, f)
		}
	}
	if kept == nil {
		kept = []string{}
	}
	// Guarded by the uid and the finalizers rather than the resourceVersion:
	// the status just written (Terminating) has moved the resourceVersion
	// on, and only a change of finalizers makes this patch wrong.
	data, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": plane.GetUID()},
		{"op": "test", "path": "/metadata/finalizers", "value": plane.GetFinalizers()},
		{"op": "replace", "path": "/metadata/finalizers", "value": kept},
	})
	if err != nil {
		return err
	}
	_, err = m.planes.Patch(ctx, plane.GetName(), types.JSONPatchType, data, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("releasing Plane %s: %w", plane.GetName(), err)
	}
	return nil
}

// CheckTemplate reports why plane cannot be made from template: the
// template must be a live plane other than root and plane itself, and must
// not be made (through its own templates) from plane.
func (m *Manager) CheckTemplate(plane, template string) error {
	switch template {
	case plane:
		return fmt.Errorf("a plane cannot be its own template")
	case planes.Root:
		return fmt.Errorf("the root plane cannot be a template: it holds the server's Planes and Fleets")
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	s := m.state[template]
	switch {
	case s == nil:
		return fmt.Errorf("plane %s does not exist", template)
	case s.terminating:
		return fmt.Errorf("plane %s is being deleted", template)
	}
	for p, n := template, 0; p != "" && n < 16; n++ {
		if p == plane {
			return fmt.Errorf("template cycle: plane %s is made from %s", template, plane)
		}
		next := m.state[p]
		if next == nil {
			break
		}
		p = next.template
	}
	return nil
}
