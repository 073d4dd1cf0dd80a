package storage

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
)

// cachedMark is what the test's cache transform puts on every object the
// watch cache loads: a read that carries it was served by the cache.
const cachedMark = "test.kplane.dev/from-cache"

// markCacheReads makes the watch cache of r's things put cachedMark on
// every object it loads.
func markCacheReads(r *Registry) {
	r.SetCacheTransform(schema.GroupResource{Resource: "things"}, func(obj runtime.Object) {
		u := obj.(*unstructured.Unstructured)
		annotations := u.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[cachedMark] = "yes"
		u.SetAnnotations(annotations)
	})
}

// A consistent read (resourceVersion "") on a server alone on its
// datastore is served by the watch cache and still sees each write
// acknowledged before it, a get as a list; on a server that shares its
// datastore it is read from the datastore.
func TestConsistentReadsFromTheCache(t *testing.T) {
	for _, sole := range []bool{true, false} {
		t.Run(fmt.Sprintf("sole=%v", sole), func(t *testing.T) {
			r := NewRegistry()
			r.SetSoleServer(sole)
			markCacheReads(r)
			ctx, s := cachedThings(t, r)
			ctx = planes.WithPlane(ctx, "p")
			const key = "/things/ns/thing-0"
			for i := range 30 {
				obj := counted("p", fmt.Sprintf("thing-%d", i), 0, "x")
				obj.SetNamespace("ns")
				obj.SetResourceVersion("")
				if err := s.Create(ctx, "/things/ns/"+obj.GetName(), obj, &unstructured.Unstructured{}, 0); err != nil {
					t.Fatal(err)
				}
				updated := &unstructured.Unstructured{}
				err := s.GuaranteedUpdate(ctx, key, updated, false, nil,
					func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
						out := input.DeepCopyObject().(*unstructured.Unstructured)
						annotations := out.GetAnnotations()
						delete(annotations, cachedMark)
						out.SetAnnotations(annotations)
						out.SetLabels(map[string]string{"generation": fmt.Sprint(i)})
						return out, nil, nil
					}, nil)
				if err != nil {
					t.Fatal(err)
				}

				got := &unstructured.Unstructured{}
				if err := s.Get(ctx, key, storage.GetOptions{}, got); err != nil {
					t.Fatal(err)
				}
				if got.GetResourceVersion() != updated.GetResourceVersion() || got.GetLabels()["generation"] != fmt.Sprint(i) {
					t.Fatalf("update %d wrote resourceVersion %s; a get right after it read %s, generation %q",
						i, updated.GetResourceVersion(), got.GetResourceVersion(), got.GetLabels()["generation"])
				}
				if fromCache := got.GetAnnotations()[cachedMark] != ""; fromCache != sole {
					t.Fatalf("a consistent get came from the cache: %v, want %v", fromCache, sole)
				}

				list := &unstructured.UnstructuredList{}
				if err := s.GetList(ctx, "/things/ns", storage.ListOptions{Recursive: true, Predicate: storage.Everything}, list); err != nil {
					t.Fatal(err)
				}
				if n := meta.LenList(list); n != i+1 {
					t.Fatalf("a list right after create %d lists %d objects", i+1, n)
				}
				for _, item := range list.Items {
					if fromCache := item.GetAnnotations()[cachedMark] != ""; fromCache != sole {
						t.Fatalf("a consistent list came from the cache: %v, want %v", fromCache, sole)
					}
					if item.GetName() == "thing-0" && item.GetLabels()["generation"] != fmt.Sprint(i) {
						t.Fatalf("a list right after update %d has thing-0 at generation %q", i, item.GetLabels()["generation"])
					}
				}
			}
		})
	}
}

// A list of a plane's own layer alone is the datastore's, but for a caller
// that holds the plane (WithOwnLayerFromCache, a reset): the watch cache
// serves it, with every record at the revision of its last acknowledged
// write.
func TestOwnLayerListedFromTheCacheOnlyWhenAsked(t *testing.T) {
	r := NewRegistry()
	r.SetSoleServer(true)
	markCacheReads(r)
	ctx, s := cachedThings(t, r)
	ctx = planes.WithPlane(ctx, "p")
	written := map[string]string{}
	for i := range 5 {
		obj := counted("p", fmt.Sprintf("thing-%d", i), 0, "x")
		obj.SetNamespace("ns")
		obj.SetResourceVersion("")
		out := &unstructured.Unstructured{}
		if err := s.Create(ctx, "/things/ns/"+obj.GetName(), obj, out, 0); err != nil {
			t.Fatal(err)
		}
		written[out.GetName()] = out.GetResourceVersion()
	}
	for _, c := range []struct {
		what      string
		ctx       context.Context
		fromCache bool
	}{
		{"WithOwnLayer", WithOwnLayer(ctx), false},
		{"WithOwnLayerFromCache", WithOwnLayerFromCache(ctx), true},
	} {
		list := &unstructured.UnstructuredList{}
		if err := s.GetList(c.ctx, "/things", storage.ListOptions{Recursive: true, Predicate: storage.Everything}, list); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if len(list.Items) != len(written) {
			t.Fatalf("%s: listed %d records, want %d", c.what, len(list.Items), len(written))
		}
		for _, item := range list.Items {
			if fromCache := item.GetAnnotations()[cachedMark] != ""; fromCache != c.fromCache {
				t.Errorf("%s: %s from the cache: %v, want %v", c.what, item.GetName(), fromCache, c.fromCache)
			}
			if item.GetResourceVersion() != written[item.GetName()] {
				t.Errorf("%s: %s at resourceVersion %s, written at %s", c.what, item.GetName(), item.GetResourceVersion(), written[item.GetName()])
			}
		}
	}
}
