package lifecycle

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// wipe deletes every object of plane, in every resource, straight from
// storage: a deleted plane keeps nothing, whatever finalizers its objects
// carry. It returns the number of objects deleted.
func (m *Manager) wipe(ctx context.Context, plane string) (int, error) {
	// Only the plane's own records: a template's objects are not its to delete.
	pctx := planestorage.WithOwnLayer(planes.WithPlane(ctx, plane))
	// Custom resources are stored under their CRD's storage, which exists
	// only once the CRD has been served since the server started.
	if m.config.CustomResources != nil {
		if err := m.config.CustomResources.EnsureStorages(ctx, plane); err != nil {
			return 0, err
		}
	}
	// One pass suffices: the plane is closed to requests and the ones that
	// were inside have finished, so nothing writes to it any more.
	// Most resources of a plane are empty; what a wipe costs is one
	// consistent list per resource, and those overlap well.
	// CRDs go last: deleting a plane's last CRD of a kind releases the
	// storage of its custom resources, which must be empty by then.
	var first, last []*planestorage.Store
	for _, s := range m.config.Storage.Stores() {
		if !s.Owns(plane) {
			// Another CRD content's storage of a custom resource: the
			// plane's objects are deleted through its own.
			continue
		}
		if s.Resource() == crdResource {
			last = append(last, s)
		} else {
			first = append(first, s)
		}
	}
	var total int
	for _, stores := range [][]*planestorage.Store{first, last} {
		n, err := wipeStores(pctx, plane, stores)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

var crdResource = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}

func wipeStores(ctx context.Context, plane string, stores []*planestorage.Store) (int, error) {
	var total atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(wipeParallelism)
	for _, s := range stores {
		g.Go(func() error {
			n, err := wipeStore(gctx, s)
			total.Add(int64(n))
			if err != nil {
				return fmt.Errorf("deleting %s of plane %s: %w", s.Resource(), plane, err)
			}
			return nil
		})
	}
	err := g.Wait()
	return int(total.Load()), err
}

// wipeParallelism bounds the datastore calls one plane deletion has in
// flight, so that deleting many planes at once leaves room for the rest.
const wipeParallelism = 8

func wipeStore(ctx context.Context, s *planestorage.Store) (int, error) {
	list := s.NewList()
	// A consistent read: what the datastore holds, not what a cache has seen.
	if err := s.GetList(ctx, s.ResourcePrefix(), storage.ListOptions{Recursive: true, Predicate: storage.Everything}, list); err != nil {
		return 0, err
	}
	n := 0
	err := meta.EachListItem(list, func(obj runtime.Object) error {
		accessor, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		key := s.ResourcePrefix() + "/" + accessor.GetName()
		if ns := accessor.GetNamespace(); ns != "" {
			key = s.ResourcePrefix() + "/" + ns + "/" + accessor.GetName()
		}
		err = s.Delete(ctx, key, s.New(), nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
		if err != nil && !storage.IsNotFound(err) && !apierrors.IsNotFound(err) {
			return err
		}
		n++
		return nil
	})
	return n, err
}
