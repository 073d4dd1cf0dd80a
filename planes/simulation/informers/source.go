package informers

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// kind says how the objects of one resource are shown to the controllers.
type kind struct {
	// object and list are empty versioned objects.
	object func() runtime.Object
	list   func() runtime.Object
	// fold folds plane into a converted object. The object shares slices
	// and maps with the watch cache's: fold replaces what it changes.
	fold func(plane string, obj runtime.Object)
	// keep says whether the controllers want the object at all (nil: all).
	keep func(obj runtime.Object) bool
}

// Templates tells which planes show a template's objects as their own.
type Templates interface {
	// Inherits returns the template whose objects plane shows ("" for
	// none, and for a plane being deleted).
	Inherits(plane string) string
	// Dependents returns the planes made from template.
	Dependents(template string) []string
}

// source lists and watches one shared watch cache across every plane and
// hands out versioned objects with their plane folded in: the
// ListerWatcher of one client-go informer for all planes.
//
// A plane made from a template stores only what it changed; the rest it
// inherits, and the controllers must see it there too (a member's
// Deployment must find its inherited ReplicaSet, or it makes a second
// one). The source adds each member's inherited objects to its list, and
// to its watch when a plane starts or stops inheriting (InheritanceChanged)
// and when a reset removes a record that hid an inherited object.
type source struct {
	store *planestorage.Store
	kind  kind
	// off reports the planes whose objects the controllers must not see.
	off func(plane string) bool
	// templates is nil when no plane is made from a template.
	templates Templates
	// mayHoldOwn (nil: always) reports whether a plane's own layer may
	// hold records of the resource.
	mayHoldOwn func(plane string, store *planestorage.Store) bool
	// plane, when set, scopes the source to one plane: what the plane
	// serves, its inherited objects included by the storage itself.
	plane string

	mu sync.Mutex
	// told holds, per plane and informer key, the objects the informer
	// was given. An unwanted object's event reaches the informer only as
	// the deletion of an object it holds: client-go's FIFO hands a
	// deletion of an unknown key to the handlers too, and a controller
	// takes that as its object gone (the endpoints controller would
	// delete the Endpoints of a Service it never saw).
	told map[string]map[string]held
	// pending are the planes whose inherited objects the watch is to
	// look at again, with who waits for it; signal wakes it.
	pending map[string][]chan<- expectation
	signal  chan struct{}
	// deferred holds the events of the planes that await a look at what
	// they inherit (a key with no events: none yet).
	deferred map[string][]watch.Event
	// through is the revision up to which the informer has been handed
	// the cache's events, or has been spared those it is not to see.
	through atomic.Uint64

	keptMu sync.Mutex
	// keptMemo holds kind.keep's decisions on templates' records, by
	// namespace/name@resourceVersion.
	keptMemo map[string]bool
}

// handedThrough records that the informer has been handed the cache's
// events up to rv (a revision of the cache: "" or not a number, nothing).
func (s *source) handedThrough(rv string) {
	r, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	for {
		at := s.through.Load()
		if r <= at || s.through.CompareAndSwap(at, r) {
			return
		}
	}
}

// held is what the informer holds at one key.
type held struct {
	obj runtime.Object
	// inherited: the object is a template's, not a record of the plane.
	inherited bool
}

func newSource(store *planestorage.Store, k kind, off func(string) bool, templates Templates) *source {
	return &source{store: store, kind: k, off: off, templates: templates, signal: make(chan struct{}, 1)}
}

// withOwnRecordsKnown makes the source skip listing a plane's own layer
// where mayHold (Registry.MayHoldOwn) knows it holds no record.
func (s *source) withOwnRecordsKnown(mayHold func(plane string, store *planestorage.Store) bool) *source {
	s.mayHoldOwn = mayHold
	return s
}

// wanted reports whether the controllers are to see a converted object of
// plane.
func (s *source) wanted(plane string, obj runtime.Object) bool {
	return (s.off == nil || !s.off(plane)) && (s.kind.keep == nil || s.kind.keep(obj))
}

func (s *source) listerWatcher() cache.ListerWatcher {
	return &cache.ListWatch{ListWithContextFunc: s.list, WatchFuncWithContext: s.watch, DisableChunking: true}
}

// scope returns ctx addressing the planes the source covers.
func (s *source) scope(ctx context.Context) context.Context {
	if s.plane != "" {
		return planes.WithPlane(ctx, s.plane)
	}
	return planes.WithAllPlanes(ctx)
}

// planeOf returns the plane of a record the source was given.
func (s *source) planeOf(obj runtime.Object) string {
	if s.plane != "" {
		return s.plane
	}
	return planes.OfObject(obj)
}

func (s *source) list(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	// What is pending now is in the list; what comes after, the watch
	// looks at.
	looked := s.takePending()
	// Those waiting wait for the list, which holds what they look for.
	defer answer(looked, nil)
	// The list holds what the deferred events told, and what their planes
	// inherit.
	s.mu.Lock()
	s.deferred = nil
	s.mu.Unlock()
	internal := s.store.NewList()
	if err := s.store.GetList(s.scope(ctx), s.store.ResourcePrefix(), storage.ListOptions{
		ResourceVersion: "0", Recursive: true, Predicate: storage.Everything,
	}, internal); err != nil {
		return nil, fmt.Errorf("listing %s: %w", s.store.Resource(), err)
	}
	items, err := meta.ExtractList(internal)
	if err != nil {
		return nil, err
	}
	kept := make([]runtime.Object, 0, len(items))
	told := map[string]map[string]held{}
	keep := func(plane string, obj runtime.Object, inherited bool) {
		kept = append(kept, obj)
		if told[plane] == nil {
			told[plane] = map[string]held{}
		}
		told[plane][key(obj)] = held{obj: obj, inherited: inherited}
	}
	for _, item := range items {
		plane := s.planeOf(item)
		if planestorage.IsTombstone(item) {
			continue
		}
		if obj, ok := s.convert(item, plane); ok && s.wanted(plane, obj) {
			keep(plane, obj, false)
		}
	}
	for plane, objs := range s.inheritedAtList(items) {
		for _, obj := range objs {
			keep(plane, obj, true)
		}
	}
	s.mu.Lock()
	s.told = told
	s.mu.Unlock()
	out := s.kind.list()
	if err := meta.SetList(out, kept); err != nil {
		return nil, err
	}
	rv, err := meta.ListAccessor(internal)
	if err != nil {
		return nil, err
	}
	listMeta, _ := meta.ListAccessor(out)
	listMeta.SetResourceVersion(rv.GetResourceVersion())
	s.handedThrough(rv.GetResourceVersion())
	return out, nil
}

// tell records what an event tells the informer and reports whether the
// event is to reach it: a deletion only of an object it holds.
func (s *source) tell(t watch.EventType, plane, key string, obj runtime.Object, inherited bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, wasHeld := s.told[plane][key]
	if t == watch.Deleted {
		if wasHeld {
			delete(s.told[plane], key)
			if len(s.told[plane]) == 0 {
				delete(s.told, plane)
			}
		}
		return wasHeld
	}
	if s.told == nil {
		s.told = map[string]map[string]held{}
	}
	if s.told[plane] == nil {
		s.told[plane] = map[string]held{}
	}
	s.told[plane][key] = held{obj: obj, inherited: inherited}
	return true
}

// heldBy returns a copy of what the informer holds of plane.
func (s *source) heldBy(plane string) map[string]held {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]held, len(s.told[plane]))
	for k, h := range s.told[plane] {
		out[k] = h
	}
	return out
}

// key is the informer's key of a converted object.
func key(obj runtime.Object) string {
	k, _ := cache.MetaNamespaceKeyFunc(obj)
	return k
}

// convert returns the versioned form of a cached object as plane shows
// it: plane folded in, without the storage's layer mark and without
// managed fields. The record may be another plane's, a template's that
// plane inherits.
//
// No controller reads managed fields, and a write of an object without
// them keeps the stored ones (the API server takes the live object's), so
// the informers drop them as kube-controller-manager's do. A live event's
// object is a deep copy (the watch cache's caching object hands out
// copies) that the informer keeps: without its managed fields, a Running
// Pod's copy is about 0.7 KiB smaller (heap profiles of the pod-memory
// bench).
func (s *source) convert(obj runtime.Object, plane string) (runtime.Object, bool) {
	if plane == "" || !s.store.Owns(plane) {
		return nil, false
	}
	out := s.kind.object()
	if err := legacyscheme.Scheme.Convert(obj, out, nil); err != nil {
		return nil, false
	}
	accessor, err := meta.Accessor(out)
	if err != nil {
		return nil, false
	}
	// The converted metadata is a copy of the cached object's struct:
	// clearing the field here leaves the cache's object as it is.
	accessor.SetManagedFields(nil)
	if annotations := accessor.GetAnnotations(); annotations[planes.Annotation] != plane ||
		annotations[planestorage.LayerAnnotation] != "" {
		// A copy: the map is the watch cache's.
		shown := make(map[string]string, len(annotations))
		for k, v := range annotations {
			shown[k] = v
		}
		shown[planes.Annotation] = plane
		delete(shown, planestorage.LayerAnnotation)
		accessor.SetAnnotations(shown)
	}
	s.kind.fold(plane, out)
	return out, true
}
