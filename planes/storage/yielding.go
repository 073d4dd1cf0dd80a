package storage

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
)

// yielding is the datastore side of a cached storage: writes give the
// request's plane seat up while they wait on the datastore (planes.Seat).
// The seats share the server's CPUs among planes; a write waiting on the
// datastore (behind the other writers of one SQLite file, or a round trip
// to etcd) uses little, and holding its seat meanwhile would make the
// plane's cache reads wait for its writes. An update's tryUpdate
// (admission, validation) runs inside the datastore call and so without
// the seat: the price of wrapping the datastore rather than every write
// path. Reads that bypass the cache keep their seat: decoding a list from
// the datastore is CPU work.
type yielding struct {
	storage.Interface
}

func (y yielding) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	defer planes.YieldSeat(ctx)()
	return y.Interface.Create(ctx, key, obj, out, ttl)
}

func (y yielding) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	defer planes.YieldSeat(ctx)()
	return y.Interface.Delete(ctx, key, out, preconditions, validateDeletion, cachedExistingObject, opts)
}

func (y yielding) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	defer planes.YieldSeat(ctx)()
	return y.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, tryUpdate, cachedExistingObject)
}
