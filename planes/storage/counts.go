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
//
// A tombstone (a plane's record of an inherited object it deleted) counts
// its bytes but not as an object: deleting never raises the object count
// a plane's limits are checked against.
type Counts struct {
	mu    sync.RWMutex
	per   map[*Store]map[string]*Usage
	sizes map[*Store]map[types.UID]int64
	// tombs are the uids whose record is a tombstone, few next to sizes.
	tombs map[*Store]map[types.UID]struct{}
	// records are the records (objects and tombstones) of each plane,
	// never forgotten with a plane: a deleted plane's events that come
	// late take its records off, not those of a new plane of the same name.
	records map[*Store]map[string]int
	seen    map[*Store]*progress
}

// progress is the newest revision of a store whose events are counted,
// and what waits for a newer one.
type progress struct {
	rv      uint64
	waiters []waiter
	// following: the store's events are being counted as they come (not
	// between a watch's end and the next count).
	following bool
}

// waiter is called once its revision is counted.
type waiter struct {
	rv      uint64
	counted func()
}

// NewCounts returns empty counts.
func NewCounts() *Counts {
	return &Counts{per: map[*Store]map[string]*Usage{}, sizes: map[*Store]map[types.UID]int64{},
		tombs: map[*Store]map[types.UID]struct{}{}, records: map[*Store]map[string]int{}, seen: map[*Store]*progress{}}
}

// Holds reports whether plane has a record of s: false only once s is
// counted, the counts have reached every revision s's watch cache was
// given and every write of s this server acknowledged, and none of s's
// records is plane's. What asks (admission that
// would list a plane's quotas, limit ranges, webhook configurations or
// policy bindings from the cache on every request) must not be told
// "none" while the cache holds one: the counts follow the cache through
// a watch of their own, which lags it.
func (c *Counts) Holds(s *Store, plane string) bool {
	// Read before the counts: the cache may take more meanwhile, never
	// less, and the counts reached this revision or they may miss some.
	entered, cached := s.cacheEntered()
	c.mu.RLock()
	defer c.mu.RUnlock()
	if p := c.seen[s]; p == nil || p.rv == 0 || !p.following || (cached && p.rv < entered) {
		return true
	}
	return c.records[s][plane] > 0
}

// Plane returns the number of objects plane holds.
func (c *Counts) Plane(plane string) int64 { return c.Usage(plane).Objects }

// Usage returns what plane stores.
func (c *Counts) Usage(plane string) Usage {
	type held struct {
		store *Store
		usage Usage
	}
	var found []held
	c.mu.RLock()
	for s, planes := range c.per {
		if p := planes[plane]; p != nil {
			found = append(found, held{s, *p})
		}
	}
	c.mu.RUnlock()
	// Asked outside the lock: which content serves a plane is the CRD
	// index's to say, and the counting goroutines must not wait on it
	// (a watcher that falls behind is closed by the cacher).
	var u Usage
	for _, h := range found {
		// Every custom-resource storage of a group/resource sees the
		// objects of all planes; only the one serving plane counts them.
		if h.store.Owns(plane) {
			u.Objects += h.usage.Objects
			u.Bytes += h.usage.Bytes
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

// WhenCounted calls counted once s's events up to revision rv are counted
// (at once if they are), or once s is no longer followed. A writer holds
// its reservation against a plane's limits until then, so that no check
// misses its write; nothing waits meanwhile.
func (c *Counts) WhenCounted(s *Store, rv uint64, counted func()) {
	c.mu.Lock()
	p := c.progressLocked(s)
	if p.rv >= rv {
		c.mu.Unlock()
		counted()
		return
	}
	p.waiters = append(p.waiters, waiter{rv: rv, counted: counted})
	c.mu.Unlock()
}

// Reached reports whether s's events up to revision rv are counted.
func (c *Counts) Reached(s *Store, rv uint64) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	p := c.seen[s]
	return p != nil && p.rv >= rv
}

func (c *Counts) progressLocked(s *Store) *progress {
	p := c.seen[s]
	if p == nil {
		p = &progress{}
		c.seen[s] = p
	}
	return p
}

// Counted reports whether every one of stores has been counted once: until
// then a plane's usage is not known (after a start, or a new resource).
func (c *Counts) Counted(stores []*Store) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, s := range stores {
		if p := c.seen[s]; p == nil || p.rv == 0 {
			return false
		}
	}
	return true
}

// advanceLocked records that s's events up to rv are counted and returns
// the waiters to call once the lock is released.
func (c *Counts) advanceLocked(s *Store, rv uint64) []func() {
	p := c.progressLocked(s)
	if rv <= p.rv {
		return nil
	}
	p.rv = rv
	var due []func()
	kept := p.waiters[:0]
	for _, w := range p.waiters {
		if w.rv <= rv {
			due = append(due, w.counted)
		} else {
			kept = append(kept, w)
		}
	}
	p.waiters = kept
	return due
}

// callAll calls the waiters due on a goroutine of their own: a counting
// goroutine must never wait on what a waiter locks, or the cacher closes
// its watch and the counts stand still meanwhile.
func callAll(fs []func()) {
	if len(fs) == 0 {
		return
	}
	go func() {
		for _, f := range fs {
			f()
		}
	}()
}

// Follow counts s until ctx is done or s is destroyed (a custom-resource
// storage no CRD uses anymore); then its counters go.
func (c *Counts) Follow(ctx context.Context, s *Store) {
	ctx, cancel := s.UntilGone(ctx)
	defer cancel()
	defer c.drop(s)
	all := planes.WithAllPlanes(ctx)
	backoff := retryBackoff()
	for ctx.Err() == nil {
		rv, err := c.recount(all, s)
		began := time.Now()
		if err == nil {
			err = c.watch(all, s, rv)
		}
		c.setFollowing(s, false)
		if time.Since(began) > time.Minute {
			// A watch that ran for long ended (the cacher closes watchers
			// now and then): start over at once, not at the backoff's
			// cap, while the counts stand still.
			backoff = retryBackoff()
		}
		if !sleepCtx(ctx, backoff.Step()) {
			return
		}
	}
}

// setFollowing records whether s's events are counted as they come: until
// the next count after a watch ended, Holds answers that any plane may
// hold s's objects (one created meanwhile is not counted yet).
func (c *Counts) setFollowing(s *Store, following bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.seen[s]; p != nil {
		p.following = following
	}
}

func (c *Counts) drop(s *Store) {
	var due []func()
	c.mu.Lock()
	delete(c.per, s)
	delete(c.sizes, s)
	delete(c.tombs, s)
	delete(c.records, s)
	if p := c.seen[s]; p != nil {
		for _, w := range p.waiters {
			due = append(due, w.counted)
		}
	}
	delete(c.seen, s)
	c.mu.Unlock()
	callAll(due)
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
	tombs := map[types.UID]struct{}{}
	records := map[string]int{}
	_ = meta.EachListItem(list, func(obj runtime.Object) error {
		plane := planes.OfObject(obj)
		records[plane]++
		u := counts[plane]
		if u == nil {
			u = &Usage{}
			counts[plane] = u
		}
		size := s.EncodedSize(obj)
		u.Bytes += size
		uid := uidOf(obj)
		if IsTombstone(obj) {
			tombs[uid] = struct{}{}
		} else {
			u.Objects++
		}
		if uid != "" {
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
	c.tombs[s] = tombs
	c.records[s] = records
	due := c.advanceLocked(s, rv)
	c.progressLocked(s).following = true
	c.mu.Unlock()
	callAll(due)
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
	tomb := false
	if ev.Type != watch.Deleted {
		// Encoded outside the lock: it is the costly part.
		size = s.EncodedSize(ev.Object)
		tomb = IsTombstone(ev.Object)
	}
	rv, _ := strconv.ParseUint(resourceVersionOf(ev.Object), 10, 64)
	var due []func()
	defer func() { callAll(due) }()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.per[s] == nil {
		c.per[s] = map[string]*Usage{}
		c.sizes[s] = map[types.UID]int64{}
		c.tombs[s] = map[types.UID]struct{}{}
		c.records[s] = map[string]int{}
	}
	u := c.per[s][plane]
	if u == nil {
		u = &Usage{}
		c.per[s][plane] = u
	}
	old, known := c.sizes[s][uid]
	_, wasTomb := c.tombs[s][uid]
	counted := known && !wasTomb
	c.countRecordLocked(s, plane, ev.Type, known)
	switch ev.Type {
	case watch.Added, watch.Modified:
		if !counted && !tomb {
			u.Objects++
		} else if counted && tomb {
			u.Objects--
		}
		u.Bytes += size - old
		c.sizes[s][uid] = size
		if tomb {
			c.tombs[s][uid] = struct{}{}
		} else {
			delete(c.tombs[s], uid)
		}
	case watch.Deleted:
		if counted || !known {
			u.Objects--
		}
		u.Bytes -= old
		delete(c.sizes[s], uid)
		delete(c.tombs[s], uid)
	}
	if u.Objects <= 0 && u.Bytes <= 0 {
		delete(c.per[s], plane)
	}
	due = c.advanceLocked(s, rv)
}

// countRecordLocked applies an event to plane's records of s: a record is
// new when its uid is not known, and gone when a known uid is deleted.
func (c *Counts) countRecordLocked(s *Store, plane string, event watch.EventType, known bool) {
	records := c.records[s]
	if records == nil {
		records = map[string]int{}
		c.records[s] = records
	}
	switch {
	case event != watch.Deleted && !known:
		records[plane]++
	case event == watch.Deleted && known:
		if records[plane]--; records[plane] <= 0 {
			delete(records, plane)
		}
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
