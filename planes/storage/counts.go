package storage

import (
	"context"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
)

// Usage is what a plane stores: its own records, all resources together,
// and their encoded size.
type Usage struct {
	Objects int64
	Bytes   int64
}

// Counts keeps the number of stored objects and their encoded size per
// plane, all resources together, by following every resource across planes
// (one watch of each shared cache, counted by event). The first list and
// every event are read from the watch caches, which hold exactly what the
// datastore holds, so counts are right after a restart without a datastore
// scan of their own. What is kept per object is its size (to take an
// update's or deletion's old size off), keyed by uid.
type Counts struct {
	mu    sync.Mutex
	per   map[*Store]map[string]*Usage
	sizes map[*Store]map[types.UID]int64
	seen  map[*Store]*progress
}

// progress is the newest revision of a store whose events are counted,
// and the writers waiting for theirs.
type progress struct {
	rv      uint64
	waiters []waiter
}

type waiter struct {
	rv   uint64
	done chan struct{}
}

// NewCounts returns empty counts.
func NewCounts() *Counts {
	return &Counts{per: map[*Store]map[string]*Usage{}, sizes: map[*Store]map[types.UID]int64{},
		seen: map[*Store]*progress{}}
}

// Plane returns the number of objects plane holds.
func (c *Counts) Plane(plane string) int64 { return c.Usage(plane).Objects }

// Usage returns what plane stores.
func (c *Counts) Usage(plane string) Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	var u Usage
	for s, planes := range c.per {
		// Every custom-resource storage of a group/resource sees the
		// objects of all planes; only the one serving plane counts them.
		if p := planes[plane]; p != nil && s.Owns(plane) {
			u.Objects += p.Objects
			u.Bytes += p.Bytes
		}
	}
	return u
}

// Forget drops a deleted plane's counters.
func (c *Counts) Forget(plane string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, planes := range c.per {
		delete(planes, plane)
	}
}

// WaitCounted waits until s's events up to revision rv are counted, or
// until timeout: a writer holding a reservation releases it once its
// write is in the counts, so that the next check sees it.
func (c *Counts) WaitCounted(ctx context.Context, s *Store, rv uint64, timeout time.Duration) {
	c.mu.Lock()
	p := c.seen[s]
	if p == nil {
		p = &progress{}
		c.seen[s] = p
	}
	if p.rv >= rv {
		c.mu.Unlock()
		return
	}
	done := make(chan struct{})
	p.waiters = append(p.waiters, waiter{rv: rv, done: done})
	c.mu.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	case <-ctx.Done():
	}
}

// Counted reports whether every one of stores has been counted once: until
// then a plane's usage is not known (after a start, or a new resource).
func (c *Counts) Counted(stores []*Store) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range stores {
		if p := c.seen[s]; p == nil || p.rv == 0 {
			return false
		}
	}
	return true
}

// advanceLocked records that s's events up to rv are counted.
func (c *Counts) advanceLocked(s *Store, rv uint64) {
	p := c.seen[s]
	if p == nil {
		p = &progress{}
		c.seen[s] = p
	}
	if rv <= p.rv {
		return
	}
	p.rv = rv
	kept := p.waiters[:0]
	for _, w := range p.waiters {
		if w.rv <= rv {
			close(w.done)
		} else {
			kept = append(kept, w)
		}
	}
	p.waiters = kept
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
	delete(c.sizes, s)
	if p := c.seen[s]; p != nil {
		for _, w := range p.waiters {
			close(w.done)
		}
	}
	delete(c.seen, s)
}

func (c *Counts) recount(ctx context.Context, s *Store) (string, error) {
	list := s.NewList()
	if err := s.GetList(ctx, s.resourcePrefix, storage.ListOptions{
		ResourceVersion: "0", Recursive: true, Predicate: storage.Everything,
	}, list); err != nil {
		return "", err
	}
	counts := map[string]*Usage{}
	sizes := map[types.UID]int64{}
	_ = meta.EachListItem(list, func(obj runtime.Object) error {
		plane := planes.OfObject(obj)
		u := counts[plane]
		if u == nil {
			u = &Usage{}
			counts[plane] = u
		}
		size := s.EncodedSize(obj)
		u.Objects++
		u.Bytes += size
		if uid := uidOf(obj); uid != "" {
			sizes[uid] = size
		}
		return nil
	})
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", err
	}
	rv, _ := strconv.ParseUint(lm.GetResourceVersion(), 10, 64)
	c.mu.Lock()
	c.per[s] = counts
	c.sizes[s] = sizes
	c.advanceLocked(s, rv)
	c.mu.Unlock()
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
			if ev.Type == watch.Error {
				return errWatchClosed
			}
			c.count(s, ev)
		}
	}
}

// count applies one event of s to the counters.
func (c *Counts) count(s *Store, ev watch.Event) {
	if ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted {
		return
	}
	plane := planes.OfObject(ev.Object)
	uid := uidOf(ev.Object)
	var size int64
	if ev.Type != watch.Deleted {
		// Encoded outside the lock: it is the costly part.
		size = s.EncodedSize(ev.Object)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.per[s] == nil {
		c.per[s] = map[string]*Usage{}
		c.sizes[s] = map[types.UID]int64{}
	}
	u := c.per[s][plane]
	if u == nil {
		u = &Usage{}
		c.per[s][plane] = u
	}
	old, known := c.sizes[s][uid]
	switch ev.Type {
	case watch.Added, watch.Modified:
		if !known {
			u.Objects++
		}
		u.Bytes += size - old
		c.sizes[s][uid] = size
	case watch.Deleted:
		u.Objects--
		u.Bytes -= old
		delete(c.sizes[s], uid)
	}
	if u.Objects <= 0 {
		delete(c.per[s], plane)
	}
	if rv, err := strconv.ParseUint(resourceVersionOf(ev.Object), 10, 64); err == nil {
		c.advanceLocked(s, rv)
	}
}

func uidOf(obj runtime.Object) types.UID {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return accessor.GetUID()
}

func resourceVersionOf(obj runtime.Object) string {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return accessor.GetResourceVersion()
}

type watchClosedError struct{}

func (watchClosedError) Error() string { return "watch closed" }

var errWatchClosed error = watchClosedError{}
