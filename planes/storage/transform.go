package storage

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
)

// Transform rewrites, in place, an object freshly decoded from the
// datastore before the watch cache keeps it. It must not change what the
// object means: its use is to share identical parts between objects of
// many planes (the schemas of identical CRDs).
type Transform func(obj runtime.Object)

// cachedStorage is upstream's cached storage (a watch cache in front of
// the datastore, as generic.StorageWithCacher builds it). With a
// transform, it is applied to every object the cache loads, and writes
// give their plane's seat up while they wait on the datastore (yielding);
// without one, the storage is upstream's as is (ARCHITECTURE.md says why
// not every write yields). Reads that bypass the cache use the datastore
// as is. The datastore storage comes from datastore (one client for every
// resource).
func cachedStorage(transform Transform, datastore *datastoreClients) generic.StorageDecorator {
	return func(
		config *storagebackend.ConfigForResource,
		resourcePrefix string,
		keyFunc func(obj runtime.Object) (string, error),
		newFunc func() runtime.Object,
		newListFunc func() runtime.Object,
		getAttrsFunc storage.AttrFunc,
		triggerFuncs storage.IndexerFuncs,
		indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		raw, destroyRaw, err := datastore.rawStorage(config, newFunc, newListFunc, resourcePrefix)
		if err != nil {
			return nil, nil, err
		}
		source := &cacheSource{Interface: raw}
		records := recordsPrefix(datastoreKeyPrefix(config), resourcePrefix)
		datastore.observed.add(records, &source.observed)
		var cacheReads, writes storage.Interface = source, raw
		if transform != nil {
			cacheReads, writes = &transforming{Interface: source, transform: transform}, yielding{raw}
		}
		writes = acknowledging{Interface: writes, newest: &source.acknowledged}
		cacher, err := cacherstorage.NewCacherFromConfig(cacherstorage.Config{
			Storage:             cacheReads,
			Versioner:           storage.APIObjectVersioner{},
			GroupResource:       config.GroupResource,
			EventsHistoryWindow: config.EventsHistoryWindow,
			ResourcePrefix:      resourcePrefix,
			KeyFunc:             keyFunc,
			NewFunc:             newFunc,
			NewListFunc:         newListFunc,
			GetAttrsFunc:        getAttrsFunc,
			IndexerFuncs:        triggerFuncs,
			Indexers:            indexers,
			Codec:               config.Codec,
		})
		if err != nil {
			datastore.observed.remove(records, &source.observed)
			destroyRaw()
			return nil, nil, err
		}
		delegator := cacherstorage.NewCacheDelegator(cacher, writes)
		return &cachedStore{CacheDelegator: delegator, datastore: raw, source: source}, func() {
			delegator.Stop()
			cacher.Stop()
			datastore.observed.remove(records, &source.observed)
			destroyRaw()
		}, nil
	}
}

// transforming applies a Transform to what the watch cache reads.
type transforming struct {
	storage.Interface
	transform Transform
}

func (t *transforming) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if err := t.Interface.GetList(ctx, key, opts, listObj); err != nil {
		return err
	}
	return meta.EachListItem(listObj, func(obj runtime.Object) error {
		t.transform(obj)
		return nil
	})
}

func (t *transforming) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	w, err := t.Interface.Watch(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if ev.Object != nil && ev.Type != watch.Error && ev.Type != watch.Bookmark {
			obj := ev.Object
			// The datastore watch wraps objects (with the time they were
			// recorded); transform the object inside.
			if wrapped, ok := obj.(interface{ Unwrap() runtime.Object }); ok {
				obj = wrapped.Unwrap()
			}
			t.transform(obj)
		}
		return ev, true
	}), nil
}
