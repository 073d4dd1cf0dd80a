package storage

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	api "k8s.io/kubernetes/pkg/apis/core"

	"kplane.dev/kplane/planes"
)

func TestScopeKey(t *testing.T) {
	cases := []struct{ prefix, key, want string }{
		{"/pods", "/pods", "/pods/a"},
		{"/pods", "/pods/ns", "/pods/a/ns"},
		{"/pods", "/pods/ns/name", "/pods/a/ns/name"},
		{"/services/specs", "/services/specs/ns/x", "/services/specs/a/ns/x"},
	}
	for _, c := range cases {
		got, err := scopeKey(c.prefix, "a", c.key)
		if err != nil || got != c.want {
			t.Errorf("scopeKey(%q, a, %q) = %q, %v; want %q", c.prefix, c.key, got, err, c.want)
		}
	}
	for _, bad := range []string{"/podsx/ns", "/other/ns", "pods/ns", ""} {
		if got, err := scopeKey("/pods", "a", bad); err == nil {
			t.Errorf("scopeKey(/pods, a, %q) = %q, want error", bad, got)
		}
	}
}

// recorder is a storage.Interface that records the keys it is given.
type recorder struct {
	storage.Interface
	keys    []string
	created runtime.Object
	pred    storage.SelectionPredicate
}

func (r *recorder) Create(_ context.Context, key string, obj, _ runtime.Object, _ uint64) error {
	r.keys = append(r.keys, key)
	r.created = obj
	return nil
}

func (r *recorder) Get(_ context.Context, key string, _ storage.GetOptions, _ runtime.Object) error {
	r.keys = append(r.keys, key)
	return nil
}

func (r *recorder) Watch(_ context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	r.keys = append(r.keys, key)
	r.pred = opts.Predicate
	return nil, nil
}

func TestStoreRefusesCallsWithoutPlane(t *testing.T) {
	rec := &recorder{}
	s := &Store{Interface: rec, resourcePrefix: "/configmaps"}
	err := s.Get(context.Background(), "/configmaps/ns/x", storage.GetOptions{}, &api.ConfigMap{})
	if !apierrors.IsInternalError(err) || len(rec.keys) != 0 {
		t.Fatalf("a call without plane must be refused before storage: %v, keys %v", err, rec.keys)
	}
}

func TestStoreScopesKeysAndStampsObjects(t *testing.T) {
	rec := &recorder{}
	s := &Store{Interface: rec, resourcePrefix: "/configmaps"}
	ctx := planes.WithPlane(context.Background(), "team-a")

	cm := &api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns",
		Annotations: map[string]string{planes.Annotation: "forged", "keep": "me"}}}
	if err := s.Create(ctx, "/configmaps/ns/x", cm, &api.ConfigMap{}, 0); err != nil {
		t.Fatal(err)
	}
	if rec.keys[0] != "/configmaps/team-a/ns/x" {
		t.Fatalf("key %q", rec.keys[0])
	}
	got := rec.created.(*api.ConfigMap).Annotations
	if got[planes.Annotation] != "team-a" || got["keep"] != "me" {
		t.Fatalf("annotations %v: the plane annotation is server-owned, others are kept", got)
	}
}

func TestPlanePredicate(t *testing.T) {
	attrs := func(obj runtime.Object) (labels.Set, fields.Set, error) {
		return labels.Set{}, fields.Set{"metadata.name": "x"}, nil
	}
	p := planePredicate(storage.SelectionPredicate{Label: labels.Everything(), Field: fields.Everything(), GetAttrs: attrs}, "a")
	if v, ok := p.Field.RequiresExactMatch(PlaneField); !ok || v != "a" {
		t.Fatalf("predicate does not require the plane: %v", p.Field)
	}
	if len(p.IndexFields) == 0 || p.IndexFields[0] != PlaneField {
		t.Fatalf("plane is not the trigger index: %v", p.IndexFields)
	}
	expectMatchesPlaneA(t, p)
}

// The watch of a PlaneListWatch, narrowed to its plane, is evaluated
// object by object when it resumes from the datastore.
func TestPlaneListWatchPredicateMatchesItsPlane(t *testing.T) {
	p := planePredicate(everythingWatched(true), "a")
	expectMatchesPlaneA(t, p)
	if !p.AllowWatchBookmarks {
		t.Fatal("bookmarks asked for and not kept")
	}
}

// expectMatchesPlaneA checks that p matches plane a's object and not
// another plane's of the same name.
func expectMatchesPlaneA(t *testing.T, p storage.SelectionPredicate) {
	t.Helper()
	mine := &api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: map[string]string{planes.Annotation: "a"}}}
	theirs := &api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: map[string]string{planes.Annotation: "b"}}}
	if ok, err := p.Matches(mine); !ok || err != nil {
		t.Fatalf("own plane's object must match: %v", err)
	}
	if ok, _ := p.Matches(theirs); ok {
		t.Fatal("another plane's object must not match")
	}
}

func TestUntilGoneEndsWithTheStorageOrItsContext(t *testing.T) {
	newStore := func() *Store {
		s := &Store{}
		s.gone, s.markGone = context.WithCancel(context.Background())
		return s
	}

	destroyed := newStore()
	ctx, cancel := destroyed.UntilGone(context.Background())
	defer cancel()
	if ctx.Err() != nil {
		t.Fatal("ended before the storage was destroyed")
	}
	destroyed.markGone()
	mustEnd(t, ctx)
	select {
	case <-destroyed.Gone():
	default:
		t.Fatal("Gone is still open after the storage was destroyed")
	}

	kept := newStore()
	parent, stopParent := context.WithCancel(context.Background())
	ctx, cancel = kept.UntilGone(parent)
	defer cancel()
	stopParent()
	mustEnd(t, ctx)
	if kept.gone.Err() != nil {
		t.Fatal("the caller's context ending destroyed the storage")
	}

	// Cancelled by its caller, the context leaves the storage alone and
	// ends at once.
	ctx, cancel = kept.UntilGone(context.Background())
	cancel()
	mustEnd(t, ctx)
}

// mustEnd fails the test unless ctx ends within a few seconds.
func mustEnd(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the context did not end")
	}
}
