package services

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/registry/core/service/allocator"

	"kplane.dev/kplane/planes"
)

// AllocationsResource is the storage resource of every plane's allocation
// records: /registry/rangeallocations/<plane>/{clusterips,nodeports}. It is
// not served; it is a plane's storage like any other, so a plane's
// deletion and reset remove its records, a clone copies them and a member
// of a template reads its template's until it allocates itself.
var AllocationsResource = schema.GroupResource{Resource: "rangeallocations"}

// The names of a plane's two records.
const (
	clusterIPsRecord = "clusterips"
	nodePortsRecord  = "nodeports"
)

// allocationTimeout bounds one change of a record: the upstream allocator
// interfaces carry no context, so the request's cannot end it.
const allocationTimeout = 30 * time.Second

// rangeAllocationList is the list type of the records' storage (the core
// API has none: upstream keeps one record per cluster and never lists).
type rangeAllocationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []api.RangeAllocation `json:"items"`
}

func (l *rangeAllocationList) DeepCopyObject() runtime.Object {
	out := &rangeAllocationList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]api.RangeAllocation, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// allocationRecords is the one storage of all planes' records; a call's
// plane comes from its context, as for every plane-scoped storage.
type allocationRecords struct {
	store   storage.Interface
	prefix  string
	destroy func()
}

func newAllocationRecords(optsGetter generic.RESTOptionsGetter) (*allocationRecords, error) {
	opts, err := optsGetter.GetRESTOptions(AllocationsResource, &api.RangeAllocation{})
	if err != nil {
		return nil, fmt.Errorf("storage of %s: %w", AllocationsResource, err)
	}
	prefix := "/" + opts.ResourcePrefix
	keyFunc := func(obj runtime.Object) (string, error) {
		accessor, err := meta.Accessor(obj)
		if err != nil {
			return "", err
		}
		return prefix + "/" + accessor.GetName(), nil
	}
	store, destroy, err := opts.Decorator(opts.StorageConfig, prefix, keyFunc,
		func() runtime.Object { return &api.RangeAllocation{} },
		func() runtime.Object { return &rangeAllocationList{} },
		storage.DefaultClusterScopedAttr, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("storage of %s: %w", AllocationsResource, err)
	}
	return &allocationRecords{store: store, prefix: prefix, destroy: destroy}, nil
}

func (r *allocationRecords) key(name string) string { return r.prefix + "/" + name }

// seedFunc returns the allocation state of a plane that has no record
// (yet): the addresses its stored Services hold, in the record's form.
type seedFunc func(ctx context.Context) (*api.RangeAllocation, error)

// recordAllocator is an allocator.Interface whose state is one record of
// one plane in the datastore. Every change reads the record, applies
// itself to a bitmap restored from it and writes it back with a
// compare-and-swap on its revision (retried on conflict), so that servers
// sharing the datastore never hand one item out twice. Nothing of the
// record is kept between calls (an idle plane holds no bitmap) but a free
// count for metrics.
type recordAllocator struct {
	records   *allocationRecords
	plane     string
	name      string
	max       int
	offset    int
	rangeSpec string
	seed      seedFunc

	// mu serializes this server's changes of the record: concurrent
	// writers in one process would only fail each other's swaps.
	mu   sync.Mutex
	free atomic.Int64
}

var _ allocator.Interface = &recordAllocator{}

// errUnableToAllocate ends a change that found the item taken or the range
// full: nothing is written.
var errUnableToAllocate = errors.New("unable to allocate")

func (a *recordAllocator) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(planes.WithPlane(context.Background(), a.plane), allocationTimeout)
}

// load returns the bitmap of rec; a plane without a record (or with one of
// another range: the server's range changed) starts from its Services.
func (a *recordAllocator) load(ctx context.Context, rec *api.RangeAllocation) (*allocator.AllocationBitmap, error) {
	if rec.Range != a.rangeSpec {
		seeded, err := a.seed(ctx)
		if err != nil {
			return nil, err
		}
		rec = seeded
	}
	bitmap := allocator.NewAllocationMapWithOffset(a.max, a.rangeSpec, a.offset)
	if err := bitmap.Restore(rec.Range, rec.Data); err != nil {
		return nil, fmt.Errorf("restoring %s of plane %s: %w", a.name, a.plane, err)
	}
	return bitmap, nil
}

// update applies change to the plane's record.
func (a *recordAllocator) update(change func(*allocator.AllocationBitmap) error) error {
	ctx, cancel := a.context()
	defer cancel()
	err := a.swap(ctx, true, nil, change)
	if errors.Is(err, errUnableToAllocate) {
		return err
	}
	if err != nil {
		return storeerr.InterpretUpdateError(err, AllocationsResource, a.name)
	}
	return nil
}

// swap applies change to the bitmap of the plane's record and writes it
// back with a compare-and-swap, again on conflict; a record absent is
// created when ignoreNotFound, and accept (when set) may refuse the record
// as found before it is changed.
func (a *recordAllocator) swap(ctx context.Context, ignoreNotFound bool, accept func(*api.RangeAllocation) error,
	change func(*allocator.AllocationBitmap) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.records.store.GuaranteedUpdate(ctx, a.records.key(a.name), &api.RangeAllocation{}, ignoreNotFound, nil,
		storage.SimpleUpdate(func(input runtime.Object) (runtime.Object, error) {
			rec := input.(*api.RangeAllocation)
			if accept != nil {
				if err := accept(rec); err != nil {
					return nil, err
				}
			}
			bitmap, err := a.load(ctx, rec)
			if err != nil {
				return nil, err
			}
			if err := change(bitmap); err != nil {
				return nil, err
			}
			a.free.Store(int64(bitmap.Free()))
			rec.Name = a.name
			rec.Range, rec.Data = bitmap.Snapshot()
			return rec, nil
		}), nil)
}

// read returns the plane's current bitmap without changing it.
func (a *recordAllocator) read() (*allocator.AllocationBitmap, error) {
	ctx, cancel := a.context()
	defer cancel()
	rec := &api.RangeAllocation{}
	if err := a.records.store.Get(ctx, a.records.key(a.name), storage.GetOptions{IgnoreNotFound: true}, rec); err != nil {
		return nil, storeerr.InterpretGetError(err, AllocationsResource, a.name)
	}
	return a.load(ctx, rec)
}

// Allocate implements allocator.Interface.
func (a *recordAllocator) Allocate(offset int) (bool, error) {
	err := a.update(func(b *allocator.AllocationBitmap) error {
		ok, err := b.Allocate(offset)
		if err == nil && !ok {
			err = errUnableToAllocate
		}
		return err
	})
	if errors.Is(err, errUnableToAllocate) {
		return false, nil
	}
	return err == nil, err
}

// AllocateNext implements allocator.Interface.
func (a *recordAllocator) AllocateNext() (int, bool, error) {
	var offset int
	err := a.update(func(b *allocator.AllocationBitmap) error {
		next, ok, err := b.AllocateNext()
		if err == nil && !ok {
			err = errUnableToAllocate
		}
		offset = next
		return err
	})
	if errors.Is(err, errUnableToAllocate) {
		return 0, false, nil
	}
	return offset, err == nil, err
}

// Release implements allocator.Interface.
func (a *recordAllocator) Release(offset int) error {
	err := a.update(func(b *allocator.AllocationBitmap) error {
		if !b.Has(offset) {
			// Not held: nothing to write.
			return errUnableToAllocate
		}
		return b.Release(offset)
	})
	if errors.Is(err, errUnableToAllocate) {
		return nil
	}
	return err
}

// ForEach implements allocator.Interface from the current record.
func (a *recordAllocator) ForEach(fn func(int)) {
	if b, err := a.read(); err == nil {
		b.ForEach(fn)
	}
}

// Has implements allocator.Interface from the current record (the upstream
// registry asks it for dry runs).
func (a *recordAllocator) Has(offset int) bool {
	b, err := a.read()
	return err == nil && b.Has(offset)
}

// Free implements allocator.Interface: the count of the last record this
// server wrote. Upstream asks it only for its metrics, after every change;
// a read per call would double the cost of an allocation.
func (a *recordAllocator) Free() int { return int(a.free.Load()) }

// Destroy implements allocator.Interface; the storage is the REST's.
func (a *recordAllocator) Destroy() {}
