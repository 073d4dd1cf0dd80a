package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/sirupsen/logrus"
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
	w, err := m.wipeResources(ctx, plane, wipeRules{include: everyResource})
	return w.records, err
}

// wipeRules say what a wipe deletes and where it finds it.
type wipeRules struct {
	// include selects the storages the wipe looks in.
	include func(*planestorage.Store) bool
	// keep (nil: nothing) says which records stay.
	keep keepFunc
	// fromCache lists the records from the watch caches: the plane is
	// held and this server is the only one to write it
	// (planestorage.WithOwnLayerFromCache).
	fromCache bool
}

func everyResource(*planestorage.Store) bool { return true }

// wiped is what a wipe deleted: how many records, and the revision of the
// last deletion in each storage.
type wiped struct {
	records int
	upTo    map[*planestorage.Store]int64
}

func (w *wiped) deleted(s *planestorage.Store, revision int64) {
	w.records++
	if w.upTo == nil {
		w.upTo = map[*planestorage.Store]int64{}
	}
	w.upTo[s] = max(w.upTo[s], revision)
}

// wipeForReset is wipe for a reset: it keeps the plane's access
// (keptByReset), and where the plane's writes are tracked (a server alone
// on its datastore, after the plane's first reset) it lists only the
// resources the plane wrote since; the others hold nothing of it. It
// starts tracking again from nothing.
func (m *Manager) wipeForReset(ctx context.Context, plane string) (wiped, error) {
	rules := wipeRules{include: everyResource, keep: keptByReset}
	if !m.config.SoleServer {
		return m.wipeResources(ctx, plane, rules)
	}
	rules.fromCache = true
	if written, tracked := m.config.Storage.Written(plane); tracked {
		rules.include = func(s *planestorage.Store) bool {
			_, wrote := written[s.ResourcePrefix()]
			return wrote
		}
	}
	w, err := m.wipeResources(ctx, plane, rules)
	if err != nil {
		// Some records may be left where the next reset would not look.
		m.config.Storage.ForgetWrites(plane)
		return w, err
	}
	// The plane is held: nothing writes to it between the wipe and this.
	m.config.Storage.TrackWrites(plane)
	return w, nil
}

// wipeResources deletes plane's own records as rules say.
func (m *Manager) wipeResources(ctx context.Context, plane string, rules wipeRules) (wiped, error) {
	var w wiped
	// Only the plane's own records: a template's objects are not its to delete.
	pctx := planestorage.WithOwnLayer(planes.WithPlane(ctx, plane))
	if rules.fromCache {
		pctx = planestorage.WithOwnLayerFromCache(planes.WithPlane(ctx, plane))
	}
	// Custom resources are stored under their CRD's storage, which exists
	// only once the CRD has been served since the server started.
	if m.config.CustomResources != nil {
		if err := m.config.CustomResources.EnsureStorages(ctx, plane); err != nil {
			return w, err
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
		if !s.Owns(plane) || !rules.include(s) {
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
	for _, stores := range [][]*planestorage.Store{first, last} {
		if err := m.wipeStores(pctx, plane, stores, rules, &w); err != nil {
			return w, err
		}
	}
	return w, nil
}

var crdResource = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}

// wipeStores lists the plane's records in stores, then deletes them:
// in one write per batch where the datastore takes batches
// (Config.DeleteRecords), else one by one. Each step makes
// wipeParallelism calls at a time, so that they overlap their round trips
// to etcd or PostgreSQL; on SQLite, which takes one write at a time, they
// overlap the work around each write.
func (m *Manager) wipeStores(ctx context.Context, plane string, stores []*planestorage.Store, rules wipeRules, w *wiped) error {
	found := make([][]record, len(stores))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(wipeParallelism)
	for i, s := range stores {
		g.Go(func() error {
			records, err := listRecords(gctx, s, rules.keep)
			if err != nil {
				return fmt.Errorf("listing %s of plane %s: %w", s.Resource(), plane, err)
			}
			found[i] = records
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	records := slices.Concat(found...)
	if len(records) == 0 {
		return nil
	}
	if m.config.DeleteRecords != nil {
		revisions, err := m.deleteBatch(ctx, plane, records)
		if err != nil {
			return err
		}
		if revisions != nil {
			for i, r := range records {
				w.deleted(r.store, revisions[i])
			}
			return nil
		}
		// A record changed since the list (it cannot while the plane is
		// closed to requests; a server that shares the datastore might):
		// one by one, each deletion decides for itself.
	}
	return deleteEach(ctx, plane, records, w)
}

// deleteBatch deletes records through Config.DeleteRecords and returns
// the revision of each deletion; nil: one had changed since it was
// listed, and none of its batch is deleted.
func (m *Manager) deleteBatch(ctx context.Context, plane string, records []record) ([]int64, error) {
	batch := make([]DatastoreRecord, len(records))
	for i, r := range records {
		key, err := r.store.DatastoreKey(plane, r.key)
		if err != nil {
			return nil, err
		}
		batch[i] = DatastoreRecord{Key: key, Revision: r.revision}
	}
	revisions, deleted, err := m.config.DeleteRecords(ctx, batch)
	if err != nil {
		return nil, fmt.Errorf("deleting %d records of plane %s: %w", len(records), plane, err)
	}
	if !deleted {
		return nil, nil
	}
	if len(revisions) != len(records) {
		return nil, fmt.Errorf("deleting %d records of plane %s: %d revisions back", len(records), plane, len(revisions))
	}
	return revisions, nil
}

// deleteEach deletes records one by one through their storages.
func deleteEach(ctx context.Context, plane string, records []record, w *wiped) error {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(wipeParallelism)
	for _, r := range records {
		g.Go(func() error {
			out := r.store.New()
			err := r.store.Delete(gctx, r.key, out, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
			if storage.IsNotFound(err) || apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("deleting %s %s of plane %s: %w", r.store.Resource(), r.key, plane, err)
			}
			// The deleted object comes back at the deletion's revision.
			revision := int64(0)
			if accessor, err := meta.Accessor(out); err == nil {
				revision, _ = strconv.ParseInt(accessor.GetResourceVersion(), 10, 64)
			}
			mu.Lock()
			w.deleted(r.store, revision)
			mu.Unlock()
			return nil
		})
	}
	return g.Wait()
}

// awaitCaches waits until the watch cache of every storage w deleted in
// has seen its last deletion there. Until then a read from the cache (the
// NamespaceLifecycle admission's look at a namespace, a list at
// resourceVersion 0) still finds what the wipe deleted: a request held
// for a reset and let in right after it, such as a controller's creation
// of a ServiceAccount in a namespace the reset deleted, would be admitted
// into a namespace that no longer exists. A list at the revision, not
// older than it, waits for exactly that (upstream's cache waits up to 3 s,
// then answers 504, which ends the wait too: a slow cache is not a reason
// to keep the plane held).
func awaitCaches(ctx context.Context, plane string, w wiped) {
	pctx := planestorage.WithOwnLayer(planes.WithPlane(ctx, plane))
	var g errgroup.Group
	g.SetLimit(wipeParallelism)
	for s, revision := range w.upTo {
		if revision == 0 || !s.Cached() {
			continue
		}
		g.Go(func() error {
			opts := storage.ListOptions{ResourceVersion: strconv.FormatInt(revision, 10),
				ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Recursive: true, Predicate: storage.Everything}
			if err := s.GetList(pctx, s.ResourcePrefix(), opts, s.NewList()); err != nil {
				logrus.WithError(err).WithFields(logrus.Fields{"plane": plane, "resource": s.Resource().String()}).
					Warn("the watch cache has not seen the reset's deletions yet")
			}
			return nil
		})
	}
	_ = g.Wait()
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
	// A consistent read: every record the datastore holds (from the watch
	// cache only where it holds them all: WithOwnLayerFromCache).
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
