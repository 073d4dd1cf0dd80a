package storage

import (
	"context"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
)

// reserveCreate asks the write guard whether plane may store obj; the
// release it returns must be called with what the write stored.
func (s *Store) reserveCreate(ctx context.Context, plane, key string, obj runtime.Object) (func(uint64), error) {
	g := s.registry.writeGuard()
	if g == nil || plane == "" {
		return func(uint64) {}, nil
	}
	objects, bytes := g.Limited(plane)
	if !objects && !bytes {
		return func(uint64) {}, nil
	}
	var size int64
	if bytes {
		size = s.EncodedSize(obj)
	}
	return g.Reserve(ctx, s, plane, key, 1, size)
}

// guardUpdate makes tryUpdate refuse an update that grows a byte-limited
// plane past its limit, or creates an object (an update of a missing one)
// in an object-limited plane at its limit. An update that does not grow
// the plane always passes: a plane over a lowered limit can still shrink.
func (s *Store) guardUpdate(ctx context.Context, plane, key string, tryUpdate storage.UpdateFunc) storage.UpdateFunc {
	g := s.registry.writeGuard()
	if g == nil || plane == "" {
		return tryUpdate
	}
	limitObjects, limitBytes := g.Limited(plane)
	if !limitObjects && !limitBytes {
		return tryUpdate
	}
	return func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
		out, ttl, err := tryUpdate(input, res)
		if err != nil {
			return out, ttl, err
		}
		var objects, growth int64
		if res.ResourceVersion == 0 {
			objects = 1
		}
		if limitBytes {
			growth = s.EncodedSize(out)
			if objects == 0 {
				growth -= s.EncodedSize(input)
			}
		}
		if (objects == 0 || !limitObjects) && growth <= 0 {
			return out, ttl, nil
		}
		release, err := g.Reserve(ctx, s, plane, key, objects, max(growth, 0))
		if err != nil {
			return nil, nil, err
		}
		// Checked, not held: concurrent updates of one plane may pass
		// its byte limit by what they grow it together.
		release(0)
		return out, ttl, nil
	}
}

// storedAt is the revision a successful write stored out at, 0 for a
// failed one.
func storedAt(err error, out runtime.Object) uint64 {
	if err != nil || out == nil {
		return 0
	}
	accessor, err := meta.Accessor(out)
	if err != nil {
		return 0
	}
	rv, _ := strconv.ParseUint(accessor.GetResourceVersion(), 10, 64)
	return rv
}
