package storage

import (
	"context"
	"strconv"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
)

// acknowledging is the datastore side of a cached storage that records
// the revision of every write it acknowledges (newest). A client that read
// its write back from the datastore (a quota's first calculation, say) may
// send its next request before the watch cache holds that write; what
// admission reads from the cache for that request must be at least as new
// (Store.GetListAfterWrites), or a quota charges nothing for a create it
// should count.
type acknowledging struct {
	storage.Interface
	newest *atomic.Uint64
}

func (a acknowledging) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	err := a.Interface.Create(ctx, key, obj, out, ttl)
	if err == nil {
		raiseTo(a.newest, out)
	}
	return err
}

func (a acknowledging) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	err := a.Interface.Delete(ctx, key, out, preconditions, validateDeletion, cachedExistingObject, opts)
	if err == nil {
		raiseTo(a.newest, out)
	}
	return err
}

func (a acknowledging) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	err := a.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, tryUpdate, cachedExistingObject)
	if err == nil {
		raiseTo(a.newest, destination)
	}
	return err
}

// raiseTo raises newest to obj's resourceVersion.
func raiseTo(newest *atomic.Uint64, obj runtime.Object) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	raise(newest, accessor.GetResourceVersion())
}

// raise raises newest to the revision rv.
func raise(newest *atomic.Uint64, rv string) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	raiseUint(newest, n)
}

// acknowledged is the newest revision of a write of the storage this
// server acknowledged; ok is false for a storage without a cache.
func (s *Store) acknowledged() (rv uint64, ok bool) {
	source := s.source()
	if source == nil {
		return 0, false
	}
	return source.acknowledged.Load(), true
}

// GetListAfterWrites is GetList from the watch cache (opts read it: at
// resourceVersion "0"), served no older than every write of the resource
// this server acknowledged: the cache waits for its newest write rather
// than answer from before it. The cache is behind for a moment after a
// write, and most reads find it caught up; one that does not catch up
// within the cache's wait (3 s) is read from the datastore instead.
func (s *Store) GetListAfterWrites(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	fresh := s.notOlderThanWrites(opts)
	err := s.GetList(ctx, key, fresh, listObj)
	if fresh.ResourceVersion != opts.ResourceVersion && storage.IsTooLargeResourceVersion(err) {
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
		return s.GetList(ctx, key, opts, listObj)
	}
	return err
}

// notOlderThanWrites returns opts made to read no older than the newest
// write of the resource this server acknowledged.
func (s *Store) notOlderThanWrites(opts storage.ListOptions) storage.ListOptions {
	if rv, ok := s.acknowledged(); ok && rv > 0 {
		opts.ResourceVersion = strconv.FormatUint(rv, 10)
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	return opts
}
