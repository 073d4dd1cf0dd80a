package storage

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"kplane.dev/kplane/planes"
)

// A write this server acknowledged counts as given to the cache before
// the cache has it: the counts say a plane may hold what they have not
// counted up to it, and a read of the cache waits for it. A refused
// write moves nothing.
func TestAcknowledgedWritesAreWaitedFor(t *testing.T) {
	source := &cacheSource{}
	s := &Store{Interface: &cachedStore{source: source}}
	c := NewCounts()
	c.count(s, watch.Event{Type: watch.Added, Object: counted("a", "one", 2, "x")})
	c.setFollowing(s, true)
	writes := acknowledging{Interface: writingAt{rv: "5"}, newest: &source.acknowledged}
	if err := writes.Create(t.Context(), "/q", counted("b", "quota", 0, "x"), &unstructured.Unstructured{}, 0); err != nil {
		t.Fatal(err)
	}
	if !c.Holds(s, "b") || !c.Holds(s, "c") {
		t.Fatalf("with a write not counted yet: b %v, c %v; want true, true", c.Holds(s, "b"), c.Holds(s, "c"))
	}
	opts := s.notOlderThanWrites(storage.ListOptions{ResourceVersion: "0", Recursive: true})
	if opts.ResourceVersion != "5" || opts.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
		t.Fatalf("read of the cache after write 5: resourceVersion %q match %q", opts.ResourceVersion, opts.ResourceVersionMatch)
	}
	refused := acknowledging{Interface: writingAt{rv: "9", err: errors.New("refused")}, newest: &source.acknowledged}
	_ = refused.Create(t.Context(), "/q", counted("b", "quota", 0, "x"), &unstructured.Unstructured{}, 0)
	c.count(s, watch.Event{Type: watch.Added, Object: counted("b", "quota", 5, "x")})
	if !c.Holds(s, "b") || c.Holds(s, "c") {
		t.Fatalf("with the write counted: b %v, c %v; want true, false", c.Holds(s, "b"), c.Holds(s, "c"))
	}
}

// Through a real datastore and watch cache: every object created is in
// the list of the cache read right after, no older than the write.
func TestCacheReadsNoOlderThanWrites(t *testing.T) {
	ctx, s := cachedThings(t, NewRegistry())
	ctx = planes.WithPlane(ctx, "p")
	for i := range 50 {
		obj := counted("p", fmt.Sprintf("thing-%d", i), 0, "x")
		obj.SetNamespace("ns")
		obj.SetResourceVersion("")
		if err := s.Create(ctx, "/things/ns/"+obj.GetName(), obj, &unstructured.Unstructured{}, 0); err != nil {
			t.Fatal(err)
		}
		list := &unstructured.UnstructuredList{}
		opts := storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: storage.Everything}
		if err := s.GetListAfterWrites(ctx, "/things/ns", opts, list); err != nil {
			t.Fatal(err)
		}
		if n := meta.LenList(list); n != i+1 {
			t.Fatalf("the cache read right after create %d lists %d objects", i+1, n)
		}
	}
}

// cachedThings builds a namespaced resource "things" of r on a real
// kine/SQLite datastore with a watch cache, and waits until the cache
// serves.
func cachedThings(t *testing.T, r *Registry) (context.Context, *Store) {
	t.Helper()
	ctx, d := testDatastore(t)
	r.CacheEveryResource()
	config := storagebackend.NewDefaultConfig("/registry", unstructured.UnstructuredJSONScheme)
	config.Transport.ServerList = d.Endpoints
	gr := schema.GroupResource{Resource: "things"}
	built, release, err := r.decorate(gr, "", registry.StorageWithCacher())(config.ForResource(gr), "/things",
		objectKeyFunc("/things"), func() runtime.Object { return &unstructured.Unstructured{} },
		func() runtime.Object { return &unstructured.UnstructuredList{} }, storage.DefaultNamespaceScopedAttr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	s := built.(*Store)
	ready := func(ctx context.Context) (bool, error) {
		err := s.GetList(planes.WithPlane(ctx, "p"), "/things/ns", storage.ListOptions{ResourceVersion: "0", Recursive: true,
			Predicate: storage.Everything}, &unstructured.UnstructuredList{})
		return err == nil, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, ready); err != nil {
		t.Fatalf("the watch cache never became ready: %v", err)
	}
	return ctx, s
}

// writingAt is a storage whose writes answer the revision rv, or err.
type writingAt struct {
	storage.Interface
	rv  string
	err error
}

func (w writingAt) Create(_ context.Context, _ string, obj, out runtime.Object, _ uint64) error {
	if w.err != nil {
		return w.err
	}
	u := obj.(*unstructured.Unstructured).DeepCopy()
	u.SetResourceVersion(w.rv)
	out.(*unstructured.Unstructured).Object = u.Object
	return nil
}
