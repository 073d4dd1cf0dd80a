package storage

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"

	"kplane.dev/kplane/datastore"
)

// Every storage a registry builds on one datastore, cached or not, goes
// through one client; it stays open while a storage holds it and closes
// with the last one released.
func TestStoragesOfARegistryShareOneDatastoreClient(t *testing.T) {
	ctx, d := testDatastore(t)
	r := NewRegistry()
	r.CacheEveryResource()
	r.SetUncached(schema.GroupResource{Resource: "uncached"})
	config := storagebackend.NewDefaultConfig("/registry", unstructured.UnstructuredJSONScheme)
	config.Transport.ServerList = d.Endpoints
	build := func(resource string, inner generic.StorageDecorator) (*Store, factory.DestroyFunc) {
		gr := schema.GroupResource{Resource: resource}
		newFunc := func() runtime.Object { return &unstructured.Unstructured{} }
		newListFunc := func() runtime.Object { return &unstructured.UnstructuredList{} }
		s, release, err := r.decorate(gr, "", inner)(config.ForResource(gr), "/"+resource, objectKeyFunc("/"+resource),
			newFunc, newListFunc, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s.(*Store), release
	}
	stores := map[string]*Store{}
	releases := map[string]factory.DestroyFunc{}
	for resource, inner := range map[string]generic.StorageDecorator{
		"cached": registry.StorageWithCacher(), "uncached": generic.UndecoratedStorage, "raw": generic.UndecoratedStorage,
	} {
		stores[resource], releases[resource] = build(resource, inner)
	}
	if n := len(r.datastore.clients); n != 1 {
		t.Fatalf("%d datastore clients for 3 storages, want 1", n)
	}
	var shared *datastoreClient
	for _, c := range r.datastore.clients {
		shared = c
	}
	releases["cached"]()
	releases["raw"]()
	if _, err := stores["uncached"].Interface.GetCurrentResourceVersion(ctx); err != nil {
		t.Fatalf("the storage still held cannot reach the datastore: %v", err)
	}
	if err := shared.client.Ctx().Err(); err != nil {
		t.Fatalf("client closed while a storage holds it: %v", err)
	}
	releases["uncached"]()
	if n := len(r.datastore.clients); n != 0 {
		t.Errorf("%d datastore clients after every storage was released", n)
	}
	if shared.client.Ctx().Err() == nil {
		t.Error("the client is open after the last storage was released")
	}
}

// testDatastore starts a datastore (kine on SQLite) for the test; it
// stops with the test, as does the context returned.
func testDatastore(t *testing.T) (context.Context, *datastore.Datastore) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d, err := datastore.Listen(ctx, datastore.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return ctx, d
}
