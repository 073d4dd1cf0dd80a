package storage

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
)

// Counts keeps the number of stored objects per plane, all resources
// together, by following every resource across planes (one watch per
// resource, counted by event, nothing kept per object).
type Counts struct {
	mu  sync.Mutex
	per map[*Store]map[string]int64
}

// NewCounts returns empty counts.
func NewCounts() *Counts {
	return &Counts{per: map[*Store]map[string]int64{}}
}

// Plane returns the number of objects plane holds.
func (c *Counts) Plane(plane string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for s, planes := range c.per {
		// Every custom-resource storage of a group/resource sees the
		// objects of all planes; only the one serving plane counts them.
		if s.Owns(plane) {
			n += planes[plane]
		}
	}
	return n
}

// Forget drops a deleted plane's counters.
func (c *Counts) Forget(plane string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, planes := range c.per {
		delete(planes, plane)
	}
}

// Follow counts s until ctx is done or s is destroyed (a custom-resource
// storage no CRD uses anymore); then its counters go.
func (c *Counts) Follow(ctx context.Context, s *Store) {
	ctx, cancel := untilGone(ctx, s)
	defer cancel()
	defer c.drop(s)
	all := planes.WithAllPlanes(ctx)
	backoff := retryBackoff()
	for ctx.Err() == nil {
		rv, err := c.recount(all, s)
		if err == nil {
			err = c.watch(all, s, rv)
		}
		if !sleepCtx(ctx, backoff.Step()) {
			return
		}
	}
}

func (c *Counts) drop(s *Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.per, s)
}

func (c *Counts) recount(ctx context.Context, s *Store) (string, error) {
	list := s.NewList()
	if err := s.GetList(ctx, s.resourcePrefix, storage.ListOptions{
		ResourceVersion: "0", Recursive: true, Predicate: storage.Everything,
	}, list); err != nil {
		return "", err
	}
	counts := map[string]int64{}
	_ = meta.EachListItem(list, func(obj runtime.Object) error {
		counts[planes.OfObject(obj)]++
		return nil
	})
	c.mu.Lock()
	c.per[s] = counts
	c.mu.Unlock()
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", err
	}
	return lm.GetResourceVersion(), nil
}

func (c *Counts) watch(ctx context.Context, s *Store, rv string) error {
	w, err := s.Watch(ctx, s.resourcePrefix, storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: storage.Everything})
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errWatchClosed
			}
			var delta int64
			switch ev.Type {
			case watch.Added:
				delta = 1
			case watch.Deleted:
				delta = -1
			case watch.Error:
				return errWatchClosed
			default:
				continue
			}
			plane := planes.OfObject(ev.Object)
			c.mu.Lock()
			if c.per[s] == nil {
				c.per[s] = map[string]int64{}
			}
			c.per[s][plane] += delta
			if c.per[s][plane] <= 0 {
				delete(c.per[s], plane)
			}
			c.mu.Unlock()
		}
	}
}

type watchClosedError struct{}

func (watchClosedError) Error() string { return "watch closed" }

var errWatchClosed error = watchClosedError{}
