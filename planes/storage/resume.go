package storage

import (
	"context"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
)

// cachedStore is the cached storage of one resource: upstream's cache
// delegator, and the datastore behind it for the watches the cache's
// history no longer reaches.
type cachedStore struct {
	*cacherstorage.CacheDelegator
	datastore storage.Interface
	source    *cacheSource
}

// resumeFromDatastore returns a watch of the datastore from opts'
// resourceVersion when first, the first event of a watch of the storage
// shared by every plane, is its cache's 410 for a resourceVersion older
// than its history; ok is false for any other event. A client resuming a
// watch then gets every later event rather than a 410 and a relist. The
// cache's history is one window for all planes (a busy plane pushes an
// idle plane's events out of it) and starts afresh at each server start,
// so without this a watch resumed across a restart, or on a quiet plane
// of a busy server, would fail where the datastore can serve it. A
// resourceVersion the datastore compacted still ends in 410, from the
// datastore.
func (s *Store) resumeFromDatastore(ctx context.Context, key string, opts storage.ListOptions, first watch.Event) (w watch.Interface, ok bool, err error) {
	datastore, isCached := s.datastore()
	if !isCached || !beyondCacheHistory(first) {
		return nil, false, nil
	}
	w, err = datastore.Watch(ctx, key, opts)
	if err != nil {
		return nil, true, err
	}
	return s.observeDatastore(w), true, nil
}

// datastore is the storage behind the watch cache, and whether there is
// a cache; a storage without one is its own datastore.
func (s *Store) datastore() (storage.Interface, bool) {
	if cached, ok := s.Interface.(*cachedStore); ok {
		return cached.datastore, true
	}
	return s.Interface, false
}

// WatchDatastore watches every plane's objects of the resource straight
// from the datastore, from opts' resourceVersion: for a follower of all
// planes whose revision the watch cache cannot serve because the cache
// started after it (a new custom resource's storage, a server start). The
// objects are those the cache would hold; a storage without a cache
// watches as Watch does.
func (s *Store) WatchDatastore(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	plane, scoped, err := s.scope(ctx, key)
	if err != nil {
		return nil, err
	}
	if plane != "" {
		return nil, fmt.Errorf("%s: a datastore watch follows every plane, not plane %q", s.resource, plane)
	}
	datastore, _ := s.datastore()
	return datastore.Watch(ctx, scoped, opts)
}

// watchShared opens a watch of the storage shared by every plane for one
// plane's client that does not read it through a layered watch (the root
// plane's), resumed from the datastore as resumeFromDatastore says.
func (s *Store) watchShared(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	w, err := s.Interface.Watch(ctx, key, opts)
	if err != nil || opts.ResourceVersion == "" || opts.ResourceVersion == "0" {
		return w, err
	}
	// The cache answers a resourceVersion it cannot serve with a watch
	// that already holds its one error event; any other watch is handed
	// on untouched, or with the event this look took from it.
	select {
	case ev, open := <-w.ResultChan():
		if !open {
			w.Stop()
			return watch.NewEmptyWatch(), nil
		}
		resumed, ok, err := s.resumeFromDatastore(ctx, key, opts, ev)
		if !ok {
			return prepended(ev, w), nil
		}
		w.Stop()
		return resumed, err
	default:
		return w, nil
	}
}

// errorEvent is the event that ends a watch with err.
func errorEvent(err error) watch.Event {
	if status, ok := err.(apierrors.APIStatus); ok {
		s := status.Status()
		return watch.Event{Type: watch.Error, Object: &s}
	}
	return watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus}
}

// beyondCacheHistory reports whether ev is the watch cache's 410 for a
// resourceVersion older than the events it keeps.
func beyondCacheHistory(ev watch.Event) bool {
	if ev.Type != watch.Error {
		return false
	}
	status, ok := ev.Object.(*metav1.Status)
	return ok && status.Reason == metav1.StatusReasonExpired &&
		strings.HasPrefix(status.Message, "too old resource version")
}

// prepended is w with ev delivered before its own events.
func prepended(ev watch.Event, w watch.Interface) watch.Interface {
	result := make(chan watch.Event)
	stopped := make(chan struct{})
	out := &forwarding{Interface: w, result: result, stopped: stopped}
	go func() {
		defer close(result)
		for next, open := ev, true; open; next, open = <-w.ResultChan() {
			select {
			case result <- next:
			case <-stopped:
				return
			}
		}
	}()
	return out
}

// forwarding is a watch whose events a goroutine forwards from another.
type forwarding struct {
	watch.Interface
	result  chan watch.Event
	stopped chan struct{}
	once    sync.Once
}

func (f *forwarding) ResultChan() <-chan watch.Event { return f.result }

func (f *forwarding) Stop() {
	f.once.Do(func() {
		close(f.stopped)
		f.Interface.Stop()
	})
}
