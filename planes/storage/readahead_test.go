package storage

import (
	"fmt"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
)

// A cache's first list under a prefix read ahead is that read: the
// records as they were at the read's revision, in the same pages, with
// the read's revision for the cache to watch from; a client's list and
// the cache's next list read the datastore, and see what was written
// since.
func TestFirstCacheListTakesTheReadAhead(t *testing.T) {
	ctx, clients, raw := localThingsStorage(t, etcd3.NewDefaultDecoder(unstructured.UnstructuredJSONScheme, storage.APIObjectVersioner{}))
	create := func(name string) {
		t.Helper()
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion("v1")
		obj.SetKind("Thing")
		obj.SetName(name)
		if err := raw.Create(ctx, "/things/"+name, obj, &unstructured.Unstructured{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	const records = 450
	for i := range records {
		create(fmt.Sprintf("thing-%04d", i))
	}
	const prefix = "/registry/things/"
	readAndWait := func() int64 {
		t.Helper()
		clients.readAhead(ctx, prefix)
		clients.reads.mu.Lock()
		read := clients.reads.reads[prefix]
		clients.reads.mu.Unlock()
		<-read.done
		if read.err != nil {
			t.Fatal(read.err)
		}
		return read.rev
	}
	rev := readAndWait()
	create("thing-late")

	// A client's list is not served by the read.
	all := &unstructured.UnstructuredList{}
	if err := raw.GetList(ctx, "/things", storage.ListOptions{Recursive: true, Predicate: storage.Everything}, all); err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != records+1 {
		t.Fatalf("a client's list has %d items, want %d", len(all.Items), records+1)
	}

	// The cache's first list, in pages as a reflector reads it.
	cacheList := func() (names []string, listRV int64) {
		t.Helper()
		cont := ""
		for {
			page := &unstructured.UnstructuredList{}
			opts := storage.ListOptions{Recursive: true, Predicate: storage.SelectionPredicate{
				Label: labels.Everything(), Limit: 100, Continue: cont, GetAttrs: storage.DefaultClusterScopedAttr}}
			if err := (&cacheSource{Interface: raw}).GetList(ctx, "/things", opts, page); err != nil {
				t.Fatal(err)
			}
			if cont == "" {
				var err error
				if listRV, err = strconv.ParseInt(page.GetResourceVersion(), 10, 64); err != nil {
					t.Fatal(err)
				}
			}
			for _, item := range page.Items {
				names = append(names, item.GetName())
			}
			if cont = page.GetContinue(); cont == "" {
				return names, listRV
			}
		}
	}
	names, listRV := cacheList()
	if listRV != rev {
		t.Errorf("the cache's first list is at revision %d, want the read's %d", listRV, rev)
	}
	if len(names) != records {
		t.Fatalf("the cache's first list has %d items, want the %d read ahead", len(names), records)
	}
	for i, name := range names {
		if want := fmt.Sprintf("thing-%04d", i); name != want {
			t.Fatalf("item %d of the cache's first list is %s, want %s", i, name, want)
		}
	}
	clients.reads.mu.Lock()
	left := len(clients.reads.reads)
	clients.reads.mu.Unlock()
	if left != 0 {
		t.Errorf("%d reads ahead kept after their list", left)
	}

	// The cache's next list reads the datastore.
	names, listRV = cacheList()
	if len(names) != records+1 || listRV <= rev {
		t.Errorf("the cache's second list has %d items at revision %d, want %d after %d", len(names), listRV, records+1, rev)
	}
}
