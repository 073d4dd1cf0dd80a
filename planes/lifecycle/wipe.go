package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"golang.org/x/sync/errgroup"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/kubernetes/pkg/apis/rbac"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// wipe deletes every object of plane, in every resource, straight from
// storage: a deleted plane keeps nothing, whatever finalizers its objects
// carry. It returns the number of objects deleted.
func (m *Manager) wipe(ctx context.Context, plane string) (int, error) {
	return m.wipeResources(ctx, plane, everyResource, nil)
}

func everyResource(*planestorage.Store) bool { return true }

// wipeForReset is wipe for a reset: it keeps the plane's access
// (keptByReset), and where the plane's writes are tracked (a server alone
// on its datastore, after the plane's first reset) it lists only the
// resources the plane wrote since; the others hold nothing of it. It
// starts tracking again from nothing.
func (m *Manager) wipeForReset(ctx context.Context, plane string) (int, error) {
	if !m.config.SoleServer {
		return m.wipeResources(ctx, plane, everyResource, keptByReset)
	}
	written, tracked := m.config.Storage.Written(plane)
	include := everyResource
	if tracked {
		include = func(s *planestorage.Store) bool {
			_, wrote := written[s.ResourcePrefix()]
			return wrote
		}
	}
	deleted, err := m.wipeResources(ctx, plane, include, keptByReset)
	if err != nil {
		// Some records may be left where the next reset would not look.
		m.config.Storage.ForgetWrites(plane)
		return deleted, err
	}
	// The plane is held: nothing writes to it between the wipe and this.
	m.config.Storage.TrackWrites(plane)
	return deleted, nil
}

// wipeResources deletes plane's own records in the resources that
// include selects, but those keep (when set) says to keep.
func (m *Manager) wipeResources(ctx context.Context, plane string, include func(*planestorage.Store) bool, keep keepFunc) (int, error) {
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
		if !s.Owns(plane) || !include(s) {
			// Another CRD content's storage of a custom resource (the
			// plane's objects are deleted through its own), or one the
			// plane did not write.
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
		n, err := m.wipeStores(pctx, plane, stores, keep)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

var crdResource = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}

// wipeStores lists the plane's records in stores, then deletes them:
// in one write per batch where the datastore takes batches
// (Config.DeleteRecords), else one by one. Each step makes
// wipeParallelism calls at a time, so that they overlap their round trips
// to etcd or PostgreSQL; on SQLite, which takes one write at a time, they
// overlap the work around each write.
func (m *Manager) wipeStores(ctx context.Context, plane string, stores []*planestorage.Store, keep keepFunc) (int, error) {
	found := make([][]record, len(stores))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(wipeParallelism)
	for i, s := range stores {
		g.Go(func() error {
			records, err := listRecords(gctx, s, keep)
			if err != nil {
				return fmt.Errorf("listing %s of plane %s: %w", s.Resource(), plane, err)
			}
			found[i] = records
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	records := slices.Concat(found...)
	if len(records) == 0 {
		return 0, nil
	}
	if m.config.DeleteRecords != nil {
		deleted, err := m.deleteBatch(ctx, plane, records)
		if err != nil || deleted {
			return len(records), err
		}
		// A record changed since the list (it cannot while the plane is
		// closed to requests; a server that shares the datastore might):
		// one by one, each deletion decides for itself.
	}
	return len(records), deleteEach(ctx, plane, records)
}

// deleteBatch deletes records through Config.DeleteRecords; false: one had
// changed since it was listed, and none of its batch is deleted.
func (m *Manager) deleteBatch(ctx context.Context, plane string, records []record) (bool, error) {
	batch := make([]DatastoreRecord, len(records))
	for i, r := range records {
		key, err := r.store.DatastoreKey(plane, r.key)
		if err != nil {
			return false, err
		}
		batch[i] = DatastoreRecord{Key: key, Revision: r.revision}
	}
	deleted, err := m.config.DeleteRecords(ctx, batch)
	if err != nil {
		return false, fmt.Errorf("deleting %d records of plane %s: %w", len(records), plane, err)
	}
	return deleted, nil
}

// deleteEach deletes records one by one through their storages.
func deleteEach(ctx context.Context, plane string, records []record) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(wipeParallelism)
	for _, r := range records {
		g.Go(func() error {
			err := r.store.Delete(gctx, r.key, r.store.New(), nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
			if err != nil && !storage.IsNotFound(err) && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting %s %s of plane %s: %w", r.store.Resource(), r.key, plane, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// DatastoreRecord is one record of the datastore, by its key and the
// revision it was read at.
type DatastoreRecord struct {
	Key      string
	Revision int64
}

// wipeParallelism bounds the datastore calls one plane deletion has in
// flight, so that deleting many planes at once leaves room for the rest.
const wipeParallelism = 8

// record is one stored object of a plane, by its storage key, and the
// revision the wipe's list read it at.
type record struct {
	store    *planestorage.Store
	key      string
	revision int64
}

func listRecords(ctx context.Context, s *planestorage.Store, keep keepFunc) ([]record, error) {
	list := s.NewList()
	// A consistent read: what the datastore holds, not what a cache has seen.
	if err := s.GetList(ctx, s.ResourcePrefix(), storage.ListOptions{Recursive: true, Predicate: storage.Everything}, list); err != nil {
		return nil, err
	}
	var records []record
	err := meta.EachListItem(list, func(obj runtime.Object) error {
		accessor, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		if keep != nil && keep(s.Resource(), obj) {
			return nil
		}
		key := s.ResourcePrefix() + "/" + accessor.GetName()
		if ns := accessor.GetNamespace(); ns != "" {
			key = s.ResourcePrefix() + "/" + ns + "/" + accessor.GetName()
		}
		revision, err := strconv.ParseInt(accessor.GetResourceVersion(), 10, 64)
		if err != nil {
			return fmt.Errorf("%s %s: resourceVersion %q: %w", s.Resource(), key, accessor.GetResourceVersion(), err)
		}
		records = append(records, record{store: s, key: key, revision: revision})
		return nil
	})
	return records, err
}

// keepFunc says which of a plane's records a wipe leaves.
type keepFunc func(schema.GroupResource, runtime.Object) bool

var (
	serviceAccountsResource     = schema.GroupResource{Resource: "serviceaccounts"}
	clusterRoleBindingsResource = schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}
)

// keptByReset is the plane's own admin credential (`kplane kubeconfig`):
// its ServiceAccount, whose uid the handed-out tokens are bound to, and
// its cluster-admin binding as `kplane kubeconfig` made it. Without them
// a kubeconfig given to an agent stopped working at the first reset of
// its plane. A binding an episode changed is not the one that was handed
// out: it goes, as the episode's other changes do (the next
// `kplane kubeconfig` makes it again).
func keptByReset(resource schema.GroupResource, obj runtime.Object) bool {
	accessor, err := meta.Accessor(obj)
	if err != nil || accessor.GetName() != planes.AdminServiceAccount {
		return false
	}
	switch resource {
	case serviceAccountsResource:
		return accessor.GetNamespace() == metav1.NamespaceSystem
	case clusterRoleBindingsResource:
		binding, ok := obj.(*rbac.ClusterRoleBinding)
		return ok && binding.RoleRef == rbac.RoleRef{APIGroup: rbac.GroupName, Kind: "ClusterRole", Name: "cluster-admin"} &&
			len(binding.Subjects) == 1 && binding.Subjects[0] == rbac.Subject{Kind: rbac.ServiceAccountKind,
			Name: planes.AdminServiceAccount, Namespace: metav1.NamespaceSystem}
	}
	return false
}
