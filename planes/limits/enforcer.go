package limits

import (
	"context"
	"fmt"
	"path"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// countedTimeout bounds how long a write waits after a start for every
// storage's first count; the shared caches list within milliseconds.
const countedTimeout = 2 * time.Second

// heldAtMost bounds how long a stored write's reservation waits for the
// counters to hold it; they do within milliseconds unless something is
// wrong with them.
const heldAtMost = 10 * time.Second

// Planes tells what each plane's Plane sets (spec.limits, nil for none)
// and how many watches it holds open.
type Planes interface {
	Limits(plane string) *Limits
	Watches(plane string) int
}

// Config is what an Enforcer works with.
type Config struct {
	// Defaults hold every plane but root and the base planes to the
	// server's flags where its Plane sets nothing.
	Defaults Effective
	// Counts follows what each plane stores (from the shared caches).
	Counts *planestorage.Counts
	// Stores lists the storages Counts follows.
	Stores func() []*planestorage.Store
}

// Enforcer holds planes to their limits: the storage asks it before a
// write grows a plane (planestorage.WriteGuard), the handler chain before
// a request (Filter).
type Enforcer struct {
	config Config
	// planes is bound once the plane manager exists, before serving.
	planes Planes

	mu sync.Mutex
	// reserved are the writes in flight of each plane, until the counters
	// hold them.
	reserved map[string]map[*reservation]struct{}
	// rates are the token buckets of planes with a request rate, made on
	// their first request.
	rates map[string]*bucket
}

var _ planestorage.WriteGuard = &Enforcer{}

// New returns an enforcer.
func New(config Config) *Enforcer {
	return &Enforcer{config: config, reserved: map[string]map[*reservation]struct{}{}, rates: map[string]*bucket{}}
}

// Bind tells the enforcer the planes' own limits and watches; it is
// called once, before the server serves.
func (e *Enforcer) Bind(p Planes) { e.planes = p }

// Effective returns plane's limits: its Plane's over the defaults. The
// root plane and the base planes get no defaults: root is the server's
// administration, a base plane holds the bootstrap every plane shares.
func (e *Enforcer) Effective(plane string) Effective {
	var spec *Limits
	if e.planes != nil {
		spec = e.planes.Limits(plane)
	}
	if plane == planes.Root || planes.IsBase(plane) {
		return Effective{}.Over(spec)
	}
	return e.config.Defaults.Over(spec)
}

// Usage returns what plane stores and its open watches.
func (e *Enforcer) Usage(plane string) (planestorage.Usage, int) {
	watches := 0
	if e.planes != nil {
		watches = e.planes.Watches(plane)
	}
	return e.config.Counts.Usage(plane), watches
}

// Limited implements planestorage.WriteGuard.
func (e *Enforcer) Limited(plane string) (objects, bytes bool) {
	l := e.Effective(plane)
	return l.MaxObjects > 0, l.MaxBytes > 0
}

// reservation is one write in flight against its plane's limits.
type reservation struct {
	store *planestorage.Store
	// rv is the write's revision once stored, 0 before.
	rv             uint64
	objects, bytes int64
}

// Reserve implements planestorage.WriteGuard: a write adding objects and
// bytes to plane is refused (403) when the plane's stored usage plus the
// writes in flight would pass a limit; else it is counted in flight until
// the counters hold it (release with the write's revision) or release
// says it was not stored (0), so that the next write is checked against it.
func (e *Enforcer) Reserve(ctx context.Context, s *planestorage.Store, plane, key string, objects, bytes int64) (func(rv uint64), error) {
	l := e.Effective(plane)
	if err := e.waitCounted(ctx); err != nil {
		return nil, err
	}
	e.mu.Lock()
	pending := e.pendingLocked(plane)
	used := e.config.Counts.Usage(plane)
	usedObjects, usedBytes := used.Objects+pending.Objects, used.Bytes+pending.Bytes
	switch {
	case objects > 0 && l.MaxObjects > 0 && usedObjects+objects > l.MaxObjects:
		e.mu.Unlock()
		return nil, exceeded(s, key, plane, fmt.Sprintf("requested: objects=%d, used: objects=%d, limited: maxObjects=%d (%d being written)",
			objects, usedObjects, l.MaxObjects, pending.Objects))
	case bytes > 0 && l.MaxBytes > 0 && usedBytes+bytes > l.MaxBytes:
		e.mu.Unlock()
		return nil, exceeded(s, key, plane, fmt.Sprintf("requested: bytes=%d, used: bytes=%d, limited: maxBytes=%d (%d being written)",
			bytes, usedBytes, l.MaxBytes, pending.Bytes))
	}
	r := &reservation{store: s, objects: objects, bytes: bytes}
	if e.reserved[plane] == nil {
		e.reserved[plane] = map[*reservation]struct{}{}
	}
	e.reserved[plane][r] = struct{}{}
	e.mu.Unlock()
	unreserve := func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.reserved[plane], r)
		if len(e.reserved[plane]) == 0 {
			delete(e.reserved, plane)
		}
	}
	return func(rv uint64) {
		if rv == 0 {
			unreserve()
			return
		}
		e.mu.Lock()
		r.rv = rv
		e.mu.Unlock()
		// Held until counted, but not forever: counters stuck behind
		// would otherwise hold the plane at its limit whatever it deletes.
		var once sync.Once
		timer := time.AfterFunc(heldAtMost, func() { once.Do(unreserve) })
		e.config.Counts.WhenCounted(s, rv, func() {
			timer.Stop()
			once.Do(unreserve)
		})
	}, nil
}

// pendingLocked is what plane's writes in flight add to its counted
// usage. A stored write the counters already hold is not added again,
// though its reservation is still there: the counters call it done a
// moment after they count it, and a write checked in that moment would
// have found the plane one object fuller than it is. Asked before the
// counts are read, so that a write counted in between is counted twice
// (refused a moment too soon) rather than not at all.
func (e *Enforcer) pendingLocked(plane string) planestorage.Usage {
	var pending planestorage.Usage
	for r := range e.reserved[plane] {
		if r.rv != 0 && e.config.Counts.Reached(r.store, r.rv) {
			continue
		}
		pending.Objects += r.objects
		pending.Bytes += r.bytes
	}
	return pending
}

// waitCounted waits until every storage has been counted once (after a
// start): a limit checked against a partial count would let writes pass.
func (e *Enforcer) waitCounted(ctx context.Context) error {
	if e.config.Stores == nil {
		return nil
	}
	counted := func(context.Context) (bool, error) { return e.config.Counts.Counted(e.config.Stores()), nil }
	if ok, _ := counted(ctx); ok {
		return nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, countedTimeout, true, counted); err != nil {
		return apierrors.NewServiceUnavailable("the plane's usage is still being counted after the server's start; retry")
	}
	return nil
}

func exceeded(s *planestorage.Store, key, plane, detail string) error {
	return apierrors.NewForbidden(s.Resource(), path.Base(key),
		fmt.Errorf("exceeded quota: plane %s (Plane.spec.limits), %s", plane, detail))
}

// ForgetPlane drops what is kept for a deleted plane.
func (e *Enforcer) ForgetPlane(plane string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.rates, plane)
	delete(e.reserved, plane)
}

// CheckClone reports why a plane with spec cannot be cloned from source:
// the clone starts with the source's own records, and a clone born over
// its limits would refuse its first write and hold more than its tenant
// was allowed. The source's stored usage is compared, as writes are.
func (e *Enforcer) CheckClone(clone, source string, spec *Limits) error {
	l := e.config.Defaults.Over(spec)
	used := e.config.Counts.Usage(source)
	var detail string
	switch {
	case l.MaxObjects > 0 && used.Objects > l.MaxObjects:
		detail = fmt.Sprintf("cloned from %s: used: objects=%d, limited: maxObjects=%d", source, used.Objects, l.MaxObjects)
	case l.MaxBytes > 0 && used.Bytes > l.MaxBytes:
		detail = fmt.Sprintf("cloned from %s: used: bytes=%d, limited: maxBytes=%d", source, used.Bytes, l.MaxBytes)
	default:
		return nil
	}
	return apierrors.NewForbidden(planesResource, clone, fmt.Errorf("exceeded quota: plane %s (Plane.spec.limits), %s", clone, detail))
}

var planesResource = schema.GroupResource{Group: "kplane.dev", Resource: "planes"}

// OfPlane reads a Plane's spec.limits (nil for none); the CRD's schema
// has validated it.
func OfPlane(u *unstructured.Unstructured) *Limits {
	// Read in place: the converter copies what it keeps.
	field, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "limits")
	content, ok := field.(map[string]any)
	if !ok {
		return nil
	}
	l := &Limits{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, l); err != nil {
		return nil
	}
	return l
}
