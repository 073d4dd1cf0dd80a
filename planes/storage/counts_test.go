package storage

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
)

func counted(plane, uid string, rv int, data string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"data": map[string]any{"d": data}}}
	u.SetName(uid)
	u.SetUID(k8stypes.UID("uid-" + uid))
	u.SetResourceVersion(fmt.Sprint(rv))
	u.SetAnnotations(map[string]string{planes.Annotation: plane})
	return u
}

// TestCountsFollowEvents: creates, updates that grow or shrink, and
// deletes keep each plane's objects and bytes, and one plane's events
// never move another's.
func TestCountsFollowEvents(t *testing.T) {
	c := NewCounts()
	s := &Store{}
	small, big := strings.Repeat("x", 10), strings.Repeat("x", 1000)
	c.count(s, watch.Event{Type: watch.Added, Object: counted("a", "one", 2, small)})
	c.count(s, watch.Event{Type: watch.Added, Object: counted("a", "two", 3, small)})
	c.count(s, watch.Event{Type: watch.Added, Object: counted("b", "three", 4, small)})
	a := c.Usage("a")
	if a.Objects != 2 || a.Bytes != 2*s.EncodedSize(counted("a", "one", 2, small)) {
		t.Fatalf("after two creates: %+v", a)
	}
	c.count(s, watch.Event{Type: watch.Modified, Object: counted("a", "one", 5, big)})
	grown := c.Usage("a")
	if want := s.EncodedSize(counted("a", "one", 5, big)) + s.EncodedSize(counted("a", "two", 3, small)); grown.Objects != 2 || grown.Bytes != want {
		t.Fatalf("after an update that grows: %+v, want 2 objects, %d bytes", grown, want)
	}
	c.count(s, watch.Event{Type: watch.Deleted, Object: counted("a", "one", 6, big)})
	c.count(s, watch.Event{Type: watch.Deleted, Object: counted("a", "two", 7, small)})
	if u := c.Usage("a"); u != (Usage{}) {
		t.Fatalf("after deleting everything: %+v", u)
	}
	if b := c.Usage("b"); b.Objects != 1 || b.Bytes != s.EncodedSize(counted("b", "three", 4, small)) {
		t.Fatalf("plane b moved by a's events: %+v", b)
	}
	if len(c.sizes[s]) != 1 {
		t.Fatalf("sizes of deleted objects kept: %v", c.sizes[s])
	}
	if p := c.seen[s]; p == nil || p.rv != 7 {
		t.Fatalf("counted revision %+v, want 7", p)
	}
}

// TestCountsDeletedNamespaceOfMany: a namespace's objects deleted one event
// each (the namespace controller) leave the plane at zero.
func TestCountsDeletedNamespaceOfMany(t *testing.T) {
	c := NewCounts()
	s := &Store{}
	const n = 500
	for i := range n {
		c.count(s, watch.Event{Type: watch.Added, Object: counted("a", fmt.Sprint(i), i+1, "v")})
	}
	if u := c.Usage("a"); u.Objects != n {
		t.Fatalf("%d objects counted, want %d", u.Objects, n)
	}
	for i := range n {
		c.count(s, watch.Event{Type: watch.Deleted, Object: counted("a", fmt.Sprint(i), n+i+1, "v")})
	}
	if u := c.Usage("a"); u != (Usage{}) {
		t.Fatalf("after the namespace's deletion: %+v", u)
	}
}

// TestWhenCountedWaitsForTheEvent: a writer's callback runs once the
// counters hold its revision, not before, and at once when they do.
func TestWhenCountedWaitsForTheEvent(t *testing.T) {
	c := NewCounts()
	s := &Store{}
	c.count(s, watch.Event{Type: watch.Added, Object: counted("a", "one", 3, "v")})
	calls := make(chan int, 3)
	expect := func(want int, what string) {
		t.Helper()
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("%s: waiter %d called, want %d", what, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not called", what)
		}
	}
	c.WhenCounted(s, 3, func() { calls <- 1 })
	expect(1, "a counted revision")
	c.WhenCounted(s, 5, func() { calls <- 2 })
	select {
	case <-calls:
		t.Fatal("called before its revision was counted")
	default:
	}
	c.count(s, watch.Event{Type: watch.Added, Object: counted("a", "two", 5, "v")})
	expect(2, "its revision counted")
	c.WhenCounted(s, 9, func() { calls <- 3 })
	c.drop(s)
	expect(3, "a storage no longer followed")
}

// TestCountsTombstonesAreNotObjects: a plane that overrides an inherited
// object and then deletes it holds a tombstone: its bytes count, the
// object does not, so deleting never raises the object count; a reset that
// removes the tombstone takes its bytes off.
func TestCountsTombstonesAreNotObjects(t *testing.T) {
	c := NewCounts()
	s := &Store{}
	override := counted("a", "one", 2, "x")
	c.count(s, watch.Event{Type: watch.Added, Object: override})
	c.count(s, watch.Event{Type: watch.Added, Object: counted("a", "two", 3, "x")})
	if u := c.Usage("a"); u.Objects != 2 {
		t.Fatalf("before the delete: %+v", u)
	}
	tomb := counted("a", "one", 4, "x")
	if err := setLayerState(tomb, LayerDeleted); err != nil {
		t.Fatal(err)
	}
	c.count(s, watch.Event{Type: watch.Modified, Object: tomb})
	if u := c.Usage("a"); u.Objects != 1 || u.Bytes != s.EncodedSize(tomb)+s.EncodedSize(counted("a", "two", 3, "x")) {
		t.Fatalf("after turning an override into a tombstone: %+v", u)
	}
	inherited := counted("a", "three", 5, "x")
	if err := setLayerState(inherited, LayerDeleted); err != nil {
		t.Fatal(err)
	}
	c.count(s, watch.Event{Type: watch.Added, Object: inherited})
	if u := c.Usage("a"); u.Objects != 1 {
		t.Fatalf("a tombstone of an inherited object counted as an object: %+v", u)
	}
	again := counted("a", "three", 6, "x")
	if err := setLayerState(again, LayerRecreated); err != nil {
		t.Fatal(err)
	}
	c.count(s, watch.Event{Type: watch.Modified, Object: again})
	if u := c.Usage("a"); u.Objects != 2 {
		t.Fatalf("an object created again over its tombstone not counted: %+v", u)
	}
	c.count(s, watch.Event{Type: watch.Deleted, Object: tomb})
	c.count(s, watch.Event{Type: watch.Deleted, Object: again})
	c.count(s, watch.Event{Type: watch.Deleted, Object: counted("a", "two", 7, "x")})
	if u := c.Usage("a"); u != (Usage{}) {
		t.Fatalf("after removing every record: %+v", u)
	}
	if len(c.tombs[s]) != 0 {
		t.Fatalf("tombstones kept after their records went: %v", c.tombs[s])
	}
}

// TestCountsHolds: a plane holds a resource while it has a record of it,
// a tombstone included; a store not yet counted, or whose watch ended,
// holds everything; the late deletes of a forgotten plane's records do not
// make a new plane of the same name look empty.
func TestCountsHolds(t *testing.T) {
	c := NewCounts()
	s := &Store{}
	if !c.Holds(s, "a") {
		t.Fatal("a store not counted yet answered that plane a holds nothing")
	}
	c.count(s, watch.Event{Type: watch.Added, Object: counted("a", "one", 2, "x")})
	if !c.Holds(s, "b") {
		t.Fatal("a store not followed yet answered that plane b holds nothing")
	}
	// What Follow's first count records.
	c.setFollowing(s, true)
	if !c.Holds(s, "a") || c.Holds(s, "b") {
		t.Fatalf("after a's create: a %v, b %v", c.Holds(s, "a"), c.Holds(s, "b"))
	}
	c.setFollowing(s, false)
	if !c.Holds(s, "b") {
		t.Fatal("a store whose watch ended answered that plane b holds nothing")
	}
	c.setFollowing(s, true)
	tomb := counted("a", "one", 3, "x")
	if err := setLayerState(tomb, LayerDeleted); err != nil {
		t.Fatal(err)
	}
	c.count(s, watch.Event{Type: watch.Modified, Object: tomb})
	if !c.Holds(s, "a") {
		t.Fatal("a plane whose only record is a tombstone holds nothing")
	}
	c.count(s, watch.Event{Type: watch.Deleted, Object: tomb})
	if c.Holds(s, "a") {
		t.Fatal("plane a holds a record after its last was deleted")
	}

	// Plane b is deleted and made again; its first incarnation's delete
	// is counted after the second's create.
	c.count(s, watch.Event{Type: watch.Added, Object: counted("b", "old", 4, "x")})
	c.Forget("b")
	c.count(s, watch.Event{Type: watch.Added, Object: counted("b", "new", 5, "x")})
	c.count(s, watch.Event{Type: watch.Deleted, Object: counted("b", "old", 6, "x")})
	if !c.Holds(s, "b") {
		t.Fatal("a late delete of the forgotten plane b hid the new plane b's record")
	}
	c.drop(s)
	if !c.Holds(s, "c") {
		t.Fatal("a store no longer followed answered that plane c holds nothing")
	}
}

// A plane holds whatever the watch cache was given and the counts have
// not reached yet: a quota created, seen in the cache by its client, and
// not yet counted must not let the next request's admission skip it.
// Only object events move what the cache was given.
func TestCountsHoldWhatTheCacheHasAndTheyLack(t *testing.T) {
	events := watch.NewFake()
	source := &cacheSource{Interface: watching{events: events}}
	w, err := source.Watch(t.Context(), "/", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	s := &Store{Interface: &cachedStore{source: source}}
	c := NewCounts()
	c.count(s, watch.Event{Type: watch.Added, Object: counted("a", "one", 2, "x")})
	c.setFollowing(s, true)
	given := func(ev watch.Event) {
		t.Helper()
		go events.Action(ev.Type, ev.Object)
		<-w.ResultChan()
	}
	given(watch.Event{Type: watch.Added, Object: counted("a", "one", 2, "x")})
	if c.Holds(s, "b") {
		t.Fatal("plane b holds a record while the counts have what the cache has")
	}
	given(watch.Event{Type: watch.Added, Object: counted("b", "quota", 5, "x")})
	if !c.Holds(s, "b") || !c.Holds(s, "c") {
		t.Fatalf("with the cache ahead of the counts: b %v, c %v; want true, true", c.Holds(s, "b"), c.Holds(s, "c"))
	}
	c.count(s, watch.Event{Type: watch.Added, Object: counted("b", "quota", 5, "x")})
	if !c.Holds(s, "b") || c.Holds(s, "c") {
		t.Fatalf("with the counts caught up: b %v, c %v; want true, false", c.Holds(s, "b"), c.Holds(s, "c"))
	}
	bookmark := counted("", "", 9, "")
	given(watch.Event{Type: watch.Bookmark, Object: bookmark})
	if c.Holds(s, "c") {
		t.Fatal("a bookmark made plane c hold a record")
	}
}

// watching is a storage whose only call is Watch.
type watching struct {
	storage.Interface
	events watch.Interface
}

func (w watching) Watch(context.Context, string, storage.ListOptions) (watch.Interface, error) {
	return w.events, nil
}
