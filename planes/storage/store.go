package storage

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
)

// Store is the plane-scoped storage.Interface of one resource. It is shared by
// every plane; the plane of each call comes from its context.
type Store struct {
	storage.Interface
	resource       schema.GroupResource
	resourcePrefix string
	newFunc        func() runtime.Object
	newListFunc    func() runtime.Object
	// content is the CRD content key of a custom-resource storage (empty
	// for built-in resources); registry resolves which planes use it.
	content  string
	registry *Registry
	// gone ends when the storage is destroyed (the last CRD serving a
	// custom resource went away), so that followers of it stop. A context,
	// not a channel: followers tie their own contexts to it without a
	// goroutine parked per follower and storage (UntilGone).
	gone     context.Context
	markGone context.CancelFunc
	// codec encodes objects as the datastore stores them (sizes).
	codec runtime.Codec
	// keyPrefix is what the datastore's keys of this storage begin with
	// before the storage key ("/registry/").
	keyPrefix string
	// mirror: the storage of another served version of a CRD content
	// whose first version's storage is the one followed (Stores).
	mirror bool
}

var _ storage.Interface = &Store{}

// Resource is the group/resource this storage serves.
func (s *Store) Resource() schema.GroupResource { return s.resource }

// Owns reports whether this storage serves plane's objects. A built-in
// storage serves every plane; a custom-resource storage serves the planes
// whose CRD has its content. Its cache also holds other planes' objects of
// the same resource (one datastore prefix), which followers must skip.
func (s *Store) Owns(plane string) bool {
	return s.registry.servesWith(plane, s.resource, s.content)
}

// ResourcePrefix is the storage prefix of the resource ("/pods").
func (s *Store) ResourcePrefix() string { return s.resourcePrefix }

// Gone is closed once the storage is destroyed.
func (s *Store) Gone() <-chan struct{} { return s.gone.Done() }

// UntilGone returns a context that ends with ctx or when s is destroyed.
func (s *Store) UntilGone(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.gone, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// New returns an empty object of the resource's internal type.
func (s *Store) New() runtime.Object { return s.newFunc() }

// NewList returns an empty list object of the resource's internal type.
func (s *Store) NewList() runtime.Object { return s.newListFunc() }

// Cached reports whether reads at resourceVersion "0" and watches of this
// storage are served by its watch cache (memory) rather than the datastore.
func (s *Store) Cached() bool {
	_, ok := s.Interface.(*cachedStore)
	return ok
}

// cacheEntered is the newest revision the storage's watch cache was
// given or this server wrote (which the cache is given next); ok is false
// for a storage without a cache.
func (s *Store) cacheEntered() (rv uint64, ok bool) {
	source := s.source()
	if source == nil {
		return 0, false
	}
	return max(source.entered.Load(), source.acknowledged.Load()), true
}

// source is what the storage's watch cache reads the datastore
// through (nil for a storage without a cache).
func (s *Store) source() *cacheSource {
	if cached, ok := s.Interface.(*cachedStore); ok {
		return cached.source
	}
	return nil
}

func (s *Store) scope(ctx context.Context, key string) (string, string, error) {
	if planes.AllPlanes(ctx) {
		if key != s.resourcePrefix {
			return "", "", errCrossPlaneKey(s.resourcePrefix, key)
		}
		return "", key, nil
	}
	plane, err := planeOf(ctx, s.resourcePrefix)
	if err != nil {
		return "", "", err
	}
	scoped, err := scopeKey(s.resourcePrefix, plane, key)
	return plane, scoped, err
}

// scopeWrite is scope for writes, which always name one plane.
func (s *Store) scopeWrite(ctx context.Context, key string) (string, string, error) {
	if planes.AllPlanes(ctx) {
		return "", "", errCrossPlaneKey(s.resourcePrefix, key)
	}
	return s.scope(ctx, key)
}

// layered returns the templates plane is made from (nearest first), or
// nil when its own records are the whole plane: a plane made from nothing,
// or a call that asked for the plane's own layer.
func (s *Store) layered(ctx context.Context, plane string) []string {
	if plane == "" || ownLayer(ctx) {
		return nil
	}
	return s.registry.chain(plane)
}

// Create implements storage.Interface.
func (s *Store) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	plane, scoped, err := s.scopeWrite(ctx, key)
	if err != nil {
		return err
	}
	if err := s.writable(plane); err != nil {
		return err
	}
	if err := markWrite(obj, plane, ""); err != nil {
		return err
	}
	if hook := s.registry.createHook(s.resource); hook != nil {
		hook(plane, obj)
	}
	release, err := s.reserveCreate(ctx, plane, key, obj)
	if err != nil {
		return err
	}
	if chain := s.layered(ctx, plane); len(chain) > 0 {
		err = s.createLayered(ctx, plane, chain, key, obj, out, ttl)
	} else {
		err = s.Interface.Create(ctx, scoped, obj, out, ttl)
	}
	release(storedAt(err, out))
	return err
}

// Delete implements storage.Interface.
func (s *Store) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	plane, scoped, err := s.scopeWrite(ctx, key)
	if err != nil {
		return err
	}
	if err := s.writable(plane); err != nil {
		return err
	}
	if chain := s.layered(ctx, plane); len(chain) > 0 {
		return s.deleteLayered(ctx, plane, chain, key, out, preconditions, validateDeletion)
	}
	return s.Interface.Delete(ctx, scoped, out, preconditions, validateDeletion, cachedExistingObject, opts)
}

// Watch implements storage.Interface. The predicate is narrowed to the plane
// so that the shared cacher dispatches only this plane's events to it.
func (s *Store) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	plane, scoped, err := s.scope(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := s.registry.expiredByReset(s, plane, opts.ResourceVersion); err != nil {
		return nil, err
	}
	if chain := s.layered(ctx, plane); len(chain) > 0 {
		return s.watchLayered(ctx, plane, chain, key, opts)
	}
	if plane == "" {
		// The server's own followers of every plane list again after a
		// 410, as upstream's do.
		return s.Interface.Watch(ctx, scoped, opts)
	}
	opts.Predicate = planePredicate(opts.Predicate, plane)
	return s.watchShared(ctx, scoped, opts)
}

// Get implements storage.Interface.
func (s *Store) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	plane, scoped, err := s.scope(ctx, key)
	if err != nil {
		return err
	}
	if chain := s.layered(ctx, plane); len(chain) > 0 {
		return s.getLayered(ctx, plane, chain, key, opts, objPtr)
	}
	return s.getFresh(ctx, scoped, opts, objPtr)
}

// GetList implements storage.Interface.
func (s *Store) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	plane, scoped, err := s.scope(ctx, key)
	if err != nil {
		return err
	}
	if chain := s.layered(ctx, plane); len(chain) > 0 {
		return s.getListLayered(ctx, plane, chain, key, opts, listObj)
	}
	return s.getListFresh(ctx, scoped, opts, listObj)
}

// GuaranteedUpdate implements storage.Interface.
func (s *Store) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	plane, scoped, err := s.scopeWrite(ctx, key)
	if err != nil {
		return err
	}
	if err := s.writable(plane); err != nil {
		return err
	}
	tryUpdate = s.guardUpdate(ctx, plane, key, tryUpdate)
	if chain := s.layered(ctx, plane); len(chain) > 0 {
		return s.updateLayered(ctx, plane, chain, key, destination, ignoreNotFound, preconditions, tryUpdate)
	}
	stamped := func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
		out, ttl, err := tryUpdate(input, res)
		if err != nil {
			return out, ttl, err
		}
		return out, ttl, markWrite(out, plane, "")
	}
	return s.Interface.GuaranteedUpdate(ctx, scoped, destination, ignoreNotFound, preconditions, stamped, cachedExistingObject)
}

// stamp records plane on obj, replacing whatever a client put there.
func stamp(obj runtime.Object, plane string) error {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	annotations := accessor.GetAnnotations()
	if annotations[planes.Annotation] == plane {
		return nil
	}
	// Copy: the map may be shared with an object the caller still holds.
	stamped := make(map[string]string, len(annotations)+1)
	for k, v := range annotations {
		stamped[k] = v
	}
	stamped[planes.Annotation] = plane
	accessor.SetAnnotations(stamped)
	return nil
}

func planePredicate(p storage.SelectionPredicate, plane string) storage.SelectionPredicate {
	onPlane := fields.OneTermEqualSelector(PlaneField, plane)
	if p.Field == nil || p.Field.Empty() {
		p.Field = onPlane
	} else {
		p.Field = fields.AndSelectors(p.Field, onPlane)
	}
	p.IndexFields = append([]string{PlaneField}, p.IndexFields...)
	if p.GetAttrs != nil {
		p.GetAttrs = withPlaneField(p.GetAttrs)
	}
	return p
}

// Writable returns the error a write of ctx's plane would meet before it
// reaches the datastore (a template in use is read-only), for callers that
// must refuse a write before they do work for it.
func (s *Store) Writable(ctx context.Context) error {
	plane, err := planeOf(ctx, s.resourcePrefix)
	if err != nil {
		return err
	}
	return s.registry.writable(s.resource, plane)
}

// writable checks that plane may write this resource, and notes that it
// does for the planes whose writes are tracked.
func (s *Store) writable(plane string) error {
	if err := s.registry.writable(s.resource, plane); err != nil {
		return err
	}
	s.registry.noteWrite(plane, s.resourcePrefix)
	return nil
}
