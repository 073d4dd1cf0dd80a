package storage

import (
	"errors"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"

	"kplane.dev/kplane/planes"
)

// build returns a storage of registry r for resource at prefix; content ""
// is a built-in resource.
func buildStore(t *testing.T, r *Registry, resource schema.GroupResource, prefix, content string) *Store {
	t.Helper()
	return buildVersionStore(t, r, resource, prefix, content, schema.GroupVersion{})
}

// buildVersionStore is buildStore for the registry of one served version.
func buildVersionStore(t *testing.T, r *Registry, resource schema.GroupResource, prefix, content string, version schema.GroupVersion) *Store {
	t.Helper()
	inner := func(*storagebackend.ConfigForResource, string, func(runtime.Object) (string, error), func() runtime.Object,
		func() runtime.Object, storage.AttrFunc, storage.IndexerFuncs, *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		return &recorder{}, func() {}, nil
	}
	newFunc := func() runtime.Object {
		u := &unstructured.Unstructured{}
		if !version.Empty() {
			u.SetAPIVersion(version.String())
		}
		return u
	}
	s, _, err := r.decorate(resource, content, generic.StorageDecorator(inner))(nil, prefix, nil, newFunc, newFunc, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s.(*Store)
}

// A custom-resource storage is never returned for a built-in resource,
// whatever the order storages were built in, and each plane gets the one
// of its CRD content.
func TestRegistryKeepsBuiltinAndCustomApart(t *testing.T) {
	r := NewRegistry()
	crb := schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}
	gizmos := schema.GroupResource{Group: "example.org", Resource: "gizmos"}
	contents := map[string]string{"a/" + crb.String(): "fake", "a/" + gizmos.String(): "c1", "b/" + gizmos.String(): "c2"}
	r.SetContentResolver(func(plane string, gr schema.GroupResource) (string, bool) {
		c, ok := contents[plane+"/"+gr.String()]
		return c, ok
	})
	fake := buildStore(t, r, crb, "/rbac.authorization.k8s.io/clusterrolebindings", "fake")
	builtin := buildStore(t, r, crb, "/clusterrolebindings", "")
	c1 := buildStore(t, r, gizmos, "/example.org/gizmos", "c1")
	c2 := buildStore(t, r, gizmos, "/example.org/gizmos", "c2")
	for i := 0; i < 50; i++ {
		if got := r.Storage(crb); got != builtin {
			t.Fatalf("Storage(%s) returned a custom-resource storage", crb)
		}
		if got := r.StorageFor("a", crb); got != builtin {
			t.Fatalf("StorageFor(a, %s) returned a custom-resource storage", crb)
		}
	}
	if r.Storage(gizmos) != nil {
		t.Error("Storage of a custom resource must be asked per plane")
	}
	if r.StorageFor("a", gizmos) != c1 || r.StorageFor("b", gizmos) != c2 || r.StorageFor("c", gizmos) != nil {
		t.Error("StorageFor does not follow the plane's CRD content")
	}
	if c1 == c2 {
		t.Error("CRDs of different content share one storage")
	}
	if !c1.Owns("a") || c1.Owns("b") || !c2.Owns("b") || c2.Owns("a") || !builtin.Owns("b") || fake.Owns("b") {
		t.Error("Owns does not follow the plane's CRD content")
	}
	if again := buildStore(t, r, gizmos, "/example.org/gizmos", "c1"); again != c1 {
		t.Error("identical CRD content does not share its storage")
	}
}

// Each served version of a CRD content has a storage of its own, as
// upstream; the first is the one followed and found, the others only
// serve their version's requests.
func TestRegistryServedVersionsHaveStoragesOfTheirOwn(t *testing.T) {
	r := NewRegistry()
	gizmos := schema.GroupResource{Group: "example.org", Resource: "gizmos"}
	r.SetContentResolver(func(plane string, gr schema.GroupResource) (string, bool) { return "c1", plane == "a" })
	build := func(version string) *Store {
		return buildVersionStore(t, r, gizmos, "/example.org/gizmos", "c1", schema.GroupVersion{Group: "example.org", Version: version})
	}
	v1, v2 := build("v1"), build("v2")
	if v1 == v2 || v1.mirror || !v2.mirror {
		t.Fatalf("versions v1 and v2: one storage %v, mirrors %v and %v; want two, v2 a mirror of v1", v1 == v2, v1.mirror, v2.mirror)
	}
	if build("v2") != v2 {
		t.Error("a version's registries do not share its storage")
	}
	if r.StorageFor("a", gizmos) != v1 {
		t.Error("StorageFor does not return the first version's storage")
	}
	if got := r.Stores(); len(got) != 1 || got[0] != v1 {
		t.Errorf("Stores %v, want the first version's only", got)
	}
	if got := r.Caches(); len(got) != 2 {
		t.Errorf("Caches has %d storages, want both versions'", len(got))
	}
	var followed []*Store
	r.OnNewStore(func(s *Store) { followed = append(followed, s) })
	if len(followed) != 1 || followed[0] != v1 {
		t.Errorf("followed %v, want the first version's storage only", followed)
	}
}

// Keys of a custom resource follow the object, not the CRD's scope: one
// prefix holds namespaced and cluster-scoped objects of different planes.
func TestObjectKeyFunc(t *testing.T) {
	key := objectKeyFunc("/example.org/gizmos")
	u := &unstructured.Unstructured{}
	u.SetName("x")
	if k, _ := key(u); k != "/example.org/gizmos/x" {
		t.Errorf("cluster-scoped key %q", k)
	}
	u.SetNamespace("default")
	if k, _ := key(u); k != "/example.org/gizmos/default/x" {
		t.Errorf("namespaced key %q", k)
	}
}

type failingCodec struct{ runtime.Codec }

func (failingCodec) Decode([]byte, *schema.GroupVersionKind, runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	return nil, nil, errors.New("request to convert CR from an invalid group/version: example.org/v2")
}

// An object the storage's CRD cannot decode keeps its identity instead of
// failing the list or ending the watch of every plane.
func TestTolerantCodec(t *testing.T) {
	c := tolerantCodec{Codec: failingCodec{}}
	data := []byte(`{"apiVersion":"example.org/v2","kind":"Widget","metadata":{"name":"w","namespace":"default","uid":"u1",
		"annotations":{"kplane.dev/plane":"b"}},"spec":{"size":1}}`)
	into := &unstructured.Unstructured{}
	obj, _, err := c.Decode(data, nil, into)
	if err != nil {
		t.Fatal(err)
	}
	u := obj.(*unstructured.Unstructured)
	if u != into || u.GetName() != "w" || u.GetNamespace() != "default" || string(u.GetUID()) != "u1" ||
		planes.OfObject(u) != "b" || u.GetAnnotations()[UndecodableAnnotation] == "" || u.Object["spec"] != nil {
		t.Errorf("stub %v", u.Object)
	}
	if _, _, err := c.Decode([]byte(`not json`), nil, nil); err == nil {
		t.Error("garbage decoded")
	}
}

// Destroy stops the storages no holder released, once each; releases
// after it do nothing.
func TestRegistryDestroyStopsWhatIsLeft(t *testing.T) {
	r := NewRegistry()
	var mu sync.Mutex // Destroy stops storages at once
	destroyed := map[string]int{}
	build := func(prefix string) (*Store, factory.DestroyFunc) {
		inner := func(*storagebackend.ConfigForResource, string, func(runtime.Object) (string, error), func() runtime.Object,
			func() runtime.Object, storage.AttrFunc, storage.IndexerFuncs, *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
			return &recorder{}, func() {
				mu.Lock()
				destroyed[prefix]++
				mu.Unlock()
			}, nil
		}
		newFunc := func() runtime.Object { return &unstructured.Unstructured{} }
		s, release, err := r.decorate(schema.GroupResource{Resource: prefix}, "", generic.StorageDecorator(inner))(nil, "/"+prefix, nil, newFunc, newFunc, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s.(*Store), release
	}
	released, releaseIt := build("released")
	kept, releaseKept := build("kept")
	releaseIt()
	r.Destroy()
	releaseKept()
	r.Destroy()
	if destroyed["released"] != 1 || destroyed["kept"] != 1 {
		t.Errorf("destroyed %v, want each storage once", destroyed)
	}
	for _, s := range []*Store{released, kept} {
		select {
		case <-s.Gone():
		default:
			t.Errorf("%s is not gone", s.ResourcePrefix())
		}
	}
	if len(r.Stores()) != 0 {
		t.Errorf("%d storages left after Destroy", len(r.Stores()))
	}
}
