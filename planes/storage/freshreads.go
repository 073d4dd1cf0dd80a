package storage

import (
	"context"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// Consistent reads from the watch cache. A get or list at resourceVersion
// "" must see every write that completed before it, and everything an
// earlier answer showed. Upstream serves it from the datastore (kine says
// it is etcd 3.5.12, so the cache's own consistent reads, which need
// etcd's watch progress requests, are off): a SQLite query and a decode
// per get, every matching record decoded per list. A server alone on its
// datastore (SetSoleServer) sees every answer its datastore gives: the
// revision of each write it acknowledged, and of every record an answer
// showed (observedkv.go: reads, writes, the record a write that lost a race
// found instead; observeDatastore: a watch of the datastore itself). The
// newest of those under a resource's key prefix is all a client can know
// of; such a read is served by the cache at that revision, waiting for it
// if the cache is a moment behind. A cache that does not catch up within
// upstream's wait (3 s) is read around, from the datastore.
//
// Writes that do not go through a storage only delete: a plane's wipe
// (its deletion, which ends its requests first; its reset, which holds its
// requests until the caches have the deletions) and kine's expiry of a
// record with a TTL (an Event an hour old), which a read may still see
// for the moment the cache takes to hear of it. Custom resources keep the
// datastore: every served version of a CRD has a storage and a cache of
// its own, which this is not tested with.

// SetSoleServer says that no other server writes this registry's
// datastore (SQLite: the data dir is locked). Call it before the storages
// serve.
func (r *Registry) SetSoleServer(sole bool) { r.sole.Store(sole) }

// freshRevision is the resourceVersion at which the watch cache serves a
// consistent read of s, and false where the datastore must. A read of a
// plane's own layer alone (WithOwnLayer: a wipe finding the records to
// delete, a clone copying them) is the datastore's: it acts on the
// records, not on what a client is shown; but for a plane held for its
// reset (WithOwnLayerFromCache).
func (s *Store) freshRevision(ctx context.Context) (string, bool) {
	if s.registry == nil || !s.registry.sole.Load() || s.content != "" || s.mirror || ownLayerFromDatastoreOnly(ctx) {
		return "", false
	}
	source := s.source()
	if source == nil {
		return "", false
	}
	newest := max(source.acknowledged.Load(), source.observed.Load())
	if newest == 0 {
		// Nothing written since the cache listed what was there.
		return "0", true
	}
	return strconv.FormatUint(newest, 10), true
}

// getFresh is the storage's Get, a consistent one from the watch cache
// where freshRevision allows.
func (s *Store) getFresh(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	if opts.ResourceVersion != "" {
		return s.Interface.Get(ctx, key, opts, objPtr)
	}
	rv, ok := s.freshRevision(ctx)
	if !ok {
		return s.Interface.Get(ctx, key, opts, objPtr)
	}
	fresh := opts
	fresh.ResourceVersion = rv
	err := s.Interface.Get(ctx, key, fresh, objPtr)
	if storage.IsTooLargeResourceVersion(err) {
		return s.Interface.Get(ctx, key, opts, objPtr)
	}
	return err
}

// getListFresh is the storage's GetList, a consistent one from the watch
// cache where freshRevision allows. A list in pages keeps the datastore:
// its continue tokens name revisions the datastore can list at.
func (s *Store) getListFresh(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if opts.ResourceVersion != "" || opts.Predicate.Limit > 0 || opts.Predicate.Continue != "" {
		return s.Interface.GetList(ctx, key, opts, listObj)
	}
	rv, ok := s.freshRevision(ctx)
	if !ok {
		return s.Interface.GetList(ctx, key, opts, listObj)
	}
	err := s.Interface.GetList(ctx, key, listAt(opts, rv), listObj)
	if storage.IsTooLargeResourceVersion(err) {
		return s.Interface.GetList(ctx, key, opts, listObj)
	}
	return err
}

// observeDatastore raises s's observed revision to each change w delivers
// before the change reaches whoever watches: a watch of the datastore
// itself (resumeFromDatastore) can tell a client of a write before its
// writer has it acknowledged.
func (s *Store) observeDatastore(w watch.Interface) watch.Interface {
	source := s.source()
	if source == nil {
		return w
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if ev.Type == watch.Added || ev.Type == watch.Modified || ev.Type == watch.Deleted {
			if obj, err := meta.Accessor(ev.Object); err == nil {
				raise(&source.observed, obj.GetResourceVersion())
			}
		}
		return ev, true
	})
}

// ownRecord is record for plane's own layer: a consistent read from the
// watch cache where freshRevision allows.
func (s *Store) ownRecord(ctx context.Context, plane, key string, opts storage.GetOptions) (runtime.Object, error) {
	if opts.ResourceVersion == "" {
		if rv, ok := s.freshRevision(ctx); ok {
			fresh := opts
			fresh.ResourceVersion = rv
			obj, err := s.record(ctx, plane, key, fresh)
			if !storage.IsTooLargeResourceVersion(err) {
				return obj, err
			}
		}
	}
	return s.record(ctx, plane, key, opts)
}

// mergedFresh is merged with plane's own layer read consistently from the
// watch cache where freshRevision allows; the list's resourceVersion is
// then the cache's.
func (s *Store) mergedFresh(ctx context.Context, plane string, chain []string, key string, own storage.ListOptions) ([]string, map[string]runtime.Object, string, error) {
	if own.ResourceVersion == "" {
		if rv, ok := s.freshRevision(ctx); ok {
			keys, view, listRV, err := s.merged(ctx, plane, chain, key, listAt(own, rv))
			if !storage.IsTooLargeResourceVersion(err) {
				return keys, view, listRV, err
			}
		}
	}
	return s.merged(ctx, plane, chain, key, own)
}

// listAt returns opts reading the cache no older than rv (freshRevision's).
func listAt(opts storage.ListOptions, rv string) storage.ListOptions {
	opts.ResourceVersion, opts.ResourceVersionMatch = rv, metav1.ResourceVersionMatchNotOlderThan
	if rv == "0" {
		// Any revision the cache holds, as a list at resourceVersion 0.
		opts.ResourceVersionMatch = ""
	}
	return opts
}
