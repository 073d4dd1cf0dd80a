package storage

import (
	"context"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// cacheSource is what a resource's watch cache reads the datastore
// through: its lists are decoded ahead (decodeahead.go), and it records
// the newest revision it handed the cache (entered), which the counts
// must have reached before they may say that a plane holds nothing
// (Counts.Holds): the cache may hold an object the counts, which follow
// the cache from behind, have not counted yet. It also keeps the newest
// revision written through the cache's storage (acknowledging), which
// the cache has not necessarily been given yet.
type cacheSource struct {
	storage.Interface
	entered      atomic.Uint64
	acknowledged atomic.Uint64
	// observed is the newest change a watch of the datastore itself
	// delivered (freshreads.go).
	observed atomic.Uint64
}

func (c *cacheSource) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	ctx, end := withDecodeAhead(ctx)
	defer end()
	if err := c.Interface.GetList(ctx, key, opts, listObj); err != nil {
		return err
	}
	if list, err := meta.ListAccessor(listObj); err == nil {
		c.enter(list.GetResourceVersion())
	}
	return nil
}

func (c *cacheSource) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	w, err := c.Interface.Watch(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if ev.Type == watch.Added || ev.Type == watch.Modified || ev.Type == watch.Deleted {
			if obj, err := meta.Accessor(ev.Object); err == nil {
				c.enter(obj.GetResourceVersion())
			}
		}
		return ev, true
	}), nil
}

// enter records that the cache is given what the datastore held at rv.
func (c *cacheSource) enter(rv string) { raise(&c.entered, rv) }
