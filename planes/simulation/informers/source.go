package informers

import (
	"context"
	"fmt"
	"sync"

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

// source lists and watches one shared watch cache across every plane and
// hands out versioned objects with their plane folded in: the
// ListerWatcher of one client-go informer for all planes.
type source struct {
	store *planestorage.Store
	kind  kind
	// off reports the planes whose objects the controllers must not see.
	off func(plane string) bool

	// told holds the keys of the objects the informer was given. An
	// unwanted object's event reaches the informer only as the deletion
	// of an object it holds: client-go's FIFO hands a deletion of an
	// unknown key to the handlers too, and a controller takes that as
	// its object gone (the endpoints controller would delete the
	// Endpoints of a Service it never saw).
	mu   sync.Mutex
	told map[string]struct{}
}

// wanted reports whether the controllers are to see a converted object of
// plane.
func (s *source) wanted(plane string, obj runtime.Object) bool {
	return (s.off == nil || !s.off(plane)) && (s.kind.keep == nil || s.kind.keep(obj))
}

func (s *source) listerWatcher() cache.ListerWatcher {
	return &cache.ListWatch{ListWithContextFunc: s.list, WatchFuncWithContext: s.watch, DisableChunking: true}
}

func (s *source) list(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	internal := s.store.NewList()
	if err := s.store.GetList(planes.WithAllPlanes(ctx), s.store.ResourcePrefix(), storage.ListOptions{
		ResourceVersion: "0", Recursive: true, Predicate: storage.Everything,
	}, internal); err != nil {
		return nil, fmt.Errorf("listing %s of every plane: %w", s.store.Resource(), err)
	}
	items, err := meta.ExtractList(internal)
	if err != nil {
		return nil, err
	}
	out := s.kind.list()
	kept := make([]runtime.Object, 0, len(items))
	told := make(map[string]struct{}, len(items))
	for _, item := range items {
		if planestorage.IsTombstone(item) {
			continue
		}
		if obj, ok := s.convert(item); ok && s.wanted(planes.OfObject(item), obj) {
			kept = append(kept, obj)
			told[key(obj)] = struct{}{}
		}
	}
	s.mu.Lock()
	s.told = told
	s.mu.Unlock()
	if err := meta.SetList(out, kept); err != nil {
		return nil, err
	}
	rv, err := meta.ListAccessor(internal)
	if err != nil {
		return nil, err
	}
	listMeta, _ := meta.ListAccessor(out)
	listMeta.SetResourceVersion(rv.GetResourceVersion())
	return out, nil
}

func (s *source) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		return nil, fmt.Errorf("a watch of %s of every plane cannot stream its initial list", s.store.Resource())
	}
	w, err := s.store.Watch(planes.WithAllPlanes(ctx), s.store.ResourcePrefix(), storage.ListOptions{
		ResourceVersion: opts.ResourceVersion, Recursive: true, Predicate: storage.Everything,
		ProgressNotify: opts.AllowWatchBookmarks,
	})
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, s.event), nil
}

// event converts one watch event; an object the controllers do not want
// (any more: its plane's simulation was turned off) is a deletion, which
// the informer ignores for an unknown key.
func (s *source) event(ev watch.Event) (watch.Event, bool) {
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
		obj := ev.Object
		if c, ok := obj.(runtime.CacheableObject); ok {
			obj = c.GetObject()
		}
		converted, ok := s.convert(obj)
		if !ok {
			return ev, false
		}
		if ev.Type != watch.Deleted && (planestorage.IsTombstone(obj) || !s.wanted(planes.OfObject(obj), converted)) {
			ev.Type = watch.Deleted
		}
		ev.Object = converted
		return ev, s.tell(ev.Type, key(converted))
	case watch.Bookmark:
		out := s.kind.object()
		if from, err := meta.Accessor(ev.Object); err == nil {
			if to, err := meta.Accessor(out); err == nil {
				to.SetResourceVersion(from.GetResourceVersion())
				to.SetAnnotations(from.GetAnnotations())
			}
		}
		ev.Object = out
		return ev, true
	default:
		return ev, true
	}
}

// tell records what an event tells the informer and reports whether the
// event is to reach it: a deletion only of an object it holds.
func (s *source) tell(t watch.EventType, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, held := s.told[key]
	if t == watch.Deleted {
		delete(s.told, key)
		return held
	}
	if s.told == nil {
		s.told = map[string]struct{}{}
	}
	s.told[key] = struct{}{}
	return true
}

// key is the informer's key of a converted object.
func key(obj runtime.Object) string {
	k, _ := cache.MetaNamespaceKeyFunc(obj)
	return k
}

// convert returns the versioned, plane-folded form of a cached object.
func (s *source) convert(obj runtime.Object) (runtime.Object, bool) {
	plane := planes.OfObject(obj)
	if plane == "" || !s.store.Owns(plane) {
		return nil, false
	}
	out := s.kind.object()
	if err := legacyscheme.Scheme.Convert(obj, out, nil); err != nil {
		return nil, false
	}
	s.kind.fold(plane, out)
	return out, true
}
