package storage

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"

	"kplane.dev/kplane/planes"
)

// PlaneListWatch lists and watches one plane's objects of a storage for a
// client-go informer of this process, straight from the storage's watch
// cache. An informer over the loopback API pays for every object an
// encoding and a decoding, and keeps a decoded copy of its own: with
// 10,000 Planes stored that list was a fifth of a restart's CPU.
//
// Listed objects are the watch cache's own: the informer and everything
// that reads it must never modify them. Watched objects are copies the
// cache's watch hands over (its events carry a shared wrapper that copies
// on read); Trim, when set, may modify those before the informer keeps
// them.
type PlaneListWatch struct {
	// Store returns the storage now serving the resource in Plane; it is
	// asked at every list and watch, so an informer follows a storage
	// rebuilt for a new CRD content (its old watch ends with the old
	// storage).
	Store func() (*Store, error)
	Plane string
	Trim  func(runtime.Object)
}

// ListerWatcher returns lw for cache.NewSharedIndexInformer.
func (lw *PlaneListWatch) ListerWatcher() cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc:  lw.list,
		WatchFuncWithContext: lw.watch,
		// The watch cache answers a list from memory in one piece.
		DisableChunking: true,
	}
}

func (lw *PlaneListWatch) list(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	s, err := lw.Store()
	if err != nil {
		return nil, err
	}
	list := s.NewList()
	opts := storage.ListOptions{ResourceVersion: options.ResourceVersion, Recursive: true, Predicate: storage.Everything}
	if err := s.GetList(planes.WithPlane(ctx, lw.Plane), s.resourcePrefix, opts, list); err != nil {
		return nil, fmt.Errorf("listing %s of plane %s: %w", s.resource, lw.Plane, err)
	}
	return list, nil
}

func (lw *PlaneListWatch) watch(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	s, err := lw.Store()
	if err != nil {
		return nil, err
	}
	opts := storage.ListOptions{ResourceVersion: options.ResourceVersion, Recursive: true,
		Predicate: everythingWatched(options.AllowWatchBookmarks)}
	w, err := s.Watch(planes.WithPlane(ctx, lw.Plane), s.resourcePrefix, opts)
	if err != nil {
		return nil, fmt.Errorf("watching %s of plane %s: %w", s.resource, lw.Plane, err)
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		// Only an object the cache's wrapper copied is the informer's own.
		if copied := unwrap(ev.Object); copied != ev.Object {
			ev.Object = copied
			if lw.Trim != nil {
				lw.Trim(copied)
			}
		}
		return ev, true
	}), nil
}

// everythingWatched is the predicate of a watch of every object of one
// plane. The Store narrows it to the plane with a field selector, which a
// watch resumed from the datastore evaluates with GetAttrs: it must have
// one. Bookmarks keep the informer's resourceVersion moving while its
// resource does not, as the API's watch does (the registry sets them on
// the predicate too).
func everythingWatched(bookmarks bool) storage.SelectionPredicate {
	p := storage.Everything
	p.GetAttrs = storage.DefaultNamespaceScopedAttr
	p.AllowWatchBookmarks = bookmarks
	return p
}
