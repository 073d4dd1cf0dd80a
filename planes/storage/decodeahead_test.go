package storage

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
)

// countingDecoder counts the records it decodes and how many it decoded
// at once, slowly enough that the list's helpers get their share.
type countingDecoder struct {
	etcd3.Decoder
	mu               sync.Mutex
	calls, inFlight  int
	mostAtOnce       int
	decodedPerRecord map[string]int
}

func (d *countingDecoder) DecodeListItem(ctx context.Context, data []byte, rev uint64, newItem func() apiruntime.Object) (apiruntime.Object, error) {
	d.mu.Lock()
	d.calls++
	d.inFlight++
	d.mostAtOnce = max(d.mostAtOnce, d.inFlight)
	d.decodedPerRecord[fmt.Sprintf("%d", rev)]++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.inFlight--
		d.mu.Unlock()
	}()
	time.Sleep(20 * time.Microsecond)
	return d.Decoder.DecodeListItem(ctx, data, rev, newItem)
}

func (d *countingDecoder) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls, d.mostAtOnce, d.decodedPerRecord = 0, 0, map[string]int{}
}

// localThingsStorage is upstream's etcd3 storage of unstructured "things"
// under /registry/things/, reading a datastore of its own as the server
// reads its own: in process, in pages (a datastore reached over gRPC
// streams lists, which are decoded as upstream does), with decoder behind
// the decode-ahead one.
func localThingsStorage(t *testing.T, decoder etcd3.Decoder) (context.Context, *datastoreClients, storage.Interface) {
	t.Helper()
	ctx, d := testDatastore(t)
	config := storagebackend.NewDefaultConfig("/registry", unstructured.UnstructuredJSONScheme)
	config.Transport.ServerList = d.Endpoints
	clients := newDatastoreClients()
	clients.useLocal(d.Endpoints, d.InProcess.NewClient)
	shared, release, err := clients.acquire(config.Transport, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	newFunc := func() apiruntime.Object { return &unstructured.Unstructured{} }
	newListFunc := func() apiruntime.Object { return &unstructured.UnstructuredList{} }
	raw, err := etcd3.New(shared.client, nil, config.Codec, newFunc, newListFunc, "/registry", "/things",
		schema.GroupResource{Resource: "things"}, identity.NewEncryptCheckTransformer(), config.LeaseManagerConfig,
		aheadDecoder{decoder}, storage.APIObjectVersioner{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	return ctx, clients, raw
}

// A cache's list decoded ahead is the list decoded in order, item for
// item (whole, paged, filtered), every record decoded once, on more than
// one goroutine; the helpers are gone when the list returns.
func TestCacheListsDecodeAhead(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	decoder := &countingDecoder{Decoder: etcd3.NewDefaultDecoder(unstructured.UnstructuredJSONScheme, storage.APIObjectVersioner{})}
	ctx, _, raw := localThingsStorage(t, decoder)
	const records = 1000
	for i := range records {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion("v1")
		obj.SetKind("Thing")
		obj.SetName(fmt.Sprintf("thing-%04d", i))
		obj.SetLabels(map[string]string{"even": fmt.Sprint(i%2 == 0)})
		if err := raw.Create(ctx, "/things/"+obj.GetName(), obj, &unstructured.Unstructured{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	baseline := runtime.NumGoroutine()
	evens := storage.SelectionPredicate{Label: labels.SelectorFromSet(labels.Set{"even": "true"}), GetAttrs: storage.DefaultClusterScopedAttr}
	for name, opts := range map[string]storage.ListOptions{
		"whole":    {Recursive: true, Predicate: storage.Everything},
		"paged":    {Recursive: true, Predicate: storage.SelectionPredicate{Label: labels.Everything(), Limit: 300, GetAttrs: storage.DefaultClusterScopedAttr}},
		"filtered": {Recursive: true, Predicate: evens},
	} {
		decoder.reset()
		want := &unstructured.UnstructuredList{}
		if err := raw.GetList(ctx, "/things", opts, want); err != nil {
			t.Fatal(err)
		}
		if decoder.mostAtOnce != 1 {
			t.Errorf("%s: a client's list decoded %d records at once, want 1 (only cache lists decode ahead)", name, decoder.mostAtOnce)
		}
		decoder.reset()
		got := &unstructured.UnstructuredList{}
		if err := (&cacheSource{Interface: raw}).GetList(ctx, "/things", opts, got); err != nil {
			t.Fatal(err)
		}
		if len(got.Items) == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the list decoded ahead (%d items) is not the list decoded in order (%d items)", name, len(got.Items), len(want.Items))
		}
		if decoder.mostAtOnce < 2 {
			t.Errorf("%s: decoded ahead, at most %d record at once", name, decoder.mostAtOnce)
		}
		for rev, n := range decoder.decodedPerRecord {
			if n != 1 {
				t.Errorf("%s: record at revision %s decoded %d times", name, rev, n)
			}
		}
	}
	// The helpers stop at records already decoded or when the list ends.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return runtime.NumGoroutine() <= baseline, nil
	}); err != nil {
		t.Errorf("%d goroutines after the lists, %d before", runtime.NumGoroutine(), baseline)
	}
}
