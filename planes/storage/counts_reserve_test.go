package storage_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/limits"
	"kplane.dev/kplane/planes/storage"
)

// maxObjects holds every plane to n objects.
type maxObjects int64

func (m maxObjects) Limits(string) *limits.Limits {
	n := int64(m)
	return &limits.Limits{MaxObjects: &n}
}
func (maxObjects) Watches(string) int { return 0 }

// A write the counters have just counted is not also counted as in
// flight while its reservation waits to be dropped (the counters drop it
// from a goroutine of their own, a moment later): a plane's writes one
// after another reach its limit exactly, none refused early.
func TestCountedWriteIsNotAlsoInFlight(t *testing.T) {
	// One P: the counters' goroutine does not run before the next write is
	// checked, as happens on a busy server.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	counts := storage.NewCounts()
	e := limits.New(limits.Config{Counts: counts})
	e.Bind(maxObjects(3))
	s := &storage.Store{}
	for i, name := range []string{"a", "b", "c", "d"} {
		release, err := e.Reserve(context.Background(), s, "p", "/configmaps/p/default/"+name, 1, 0)
		if name == "d" {
			if !apierrors.IsForbidden(err) {
				t.Fatalf("a fourth object of a plane allowed 3: %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("object %d of a plane allowed 3: %v", i+1, err)
		}
		rv := uint64(10 + i)
		release(rv)
		cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}}
		cm.SetName(name)
		cm.SetUID(k8stypes.UID("uid-" + name))
		cm.SetResourceVersion(fmt.Sprint(rv))
		cm.SetAnnotations(map[string]string{planes.Annotation: "p"})
		counts.CountEvent(s, watch.Event{Type: watch.Added, Object: cm})
	}
}
