package snapshot

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	api "k8s.io/kubernetes/pkg/apis/core"

	"kplane.dev/kplane/planes"
)

// feed is a source whose watch events the test writes: it checks the
// taps' bookkeeping (dispatch by plane, history, backlog), not the cache.
type feed struct {
	mu sync.Mutex
	// oldest is the first revision a watch may start after.
	oldest  uint64
	watches []*watch.FakeWatcher
	from    []uint64
	// replayed are the revisions datastore watches started from.
	replayed []uint64
	gone     chan struct{}
}

func newFeed(oldest uint64) *feed { return &feed{oldest: oldest, gone: make(chan struct{})} }

func (f *feed) Watch(_ context.Context, _ string, opts storage.ListOptions) (watch.Interface, error) {
	return f.open(opts, false)
}

// WatchDatastore: the datastore holds every revision.
func (f *feed) WatchDatastore(_ context.Context, _ string, opts storage.ListOptions) (watch.Interface, error) {
	if !opts.ProgressNotify {
		return nil, errors.New("a datastore watch without progress notifications has no bookmarks")
	}
	return f.open(opts, true)
}

func (f *feed) open(opts storage.ListOptions, datastore bool) (watch.Interface, error) {
	rv, err := strconv.ParseUint(opts.ResourceVersion, 10, 64)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := watch.NewFakeWithChanSize(64, false)
	if rv < f.oldest && !datastore {
		w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old"})
		return w, nil
	}
	if datastore {
		f.replayed = append(f.replayed, rv)
	}
	f.watches = append(f.watches, w)
	f.from = append(f.from, rv)
	return w, nil
}

func (f *feed) Resource() schema.GroupResource { return schema.GroupResource{Resource: "configmaps"} }

// LayerEvent: the feed's planes are made from nothing.
func (f *feed) LayerEvent(_ context.Context, _ string, ev watch.Event) (watch.Event, bool) {
	return ev, true
}
func (f *feed) ResourcePrefix() string { return "/configmaps" }
func (f *feed) Gone() <-chan struct{}  { return f.gone }

func (f *feed) current() *watch.FakeWatcher {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watches[len(f.watches)-1]
}

func (f *feed) send(typ watch.EventType, plane, ns, name string, rv uint64) {
	f.current().Action(typ, &api.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: ns, ResourceVersion: strconv.FormatUint(rv, 10),
		Annotations: map[string]string{planes.Annotation: plane},
	}})
}

func testTaps() *taps {
	return newTaps(tapSettings{history: 4, linger: time.Hour, backlog: 3})
}

// receive waits for n queued events of sub.
func receive(t *testing.T, sub *subscriber, n int) ([]queued, *lostPlace) {
	t.Helper()
	var got []queued
	deadline := time.After(5 * time.Second)
	for {
		q, lost := sub.take(nil)
		got = append(got, q...)
		if len(got) >= n || lost != nil {
			return got, lost
		}
		select {
		case <-sub.notify:
		case <-deadline:
			t.Fatalf("got %d events, want %d", len(got), n)
		}
	}
}

func names(q []queued) []string {
	var out []string
	for _, e := range q {
		out = append(out, e.event.obj.(*api.ConfigMap).Name+"@"+strconv.FormatUint(e.event.rv, 10))
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// One watch serves every stream of every plane: each stream gets its
// plane's (and namespace's) events after its revision, nothing else.
func TestTapDispatchesByPlane(t *testing.T) {
	ts, src := testTaps(), newFeed(0)
	a := newSubscriber("a", "", 10)
	b := newSubscriber("b", "ns1", 10)
	for _, s := range []*subscription{{sub: a, from: 10}, {sub: b, from: 10}} {
		if err := ts.subscribe(src, s); err != nil {
			t.Fatal(err)
		}
	}
	src.send(watch.Added, "a", "ns1", "x", 11)
	src.send(watch.Added, "b", "ns2", "y", 12)
	src.send(watch.Added, "b", "ns1", "z", 13)
	src.send(watch.Modified, "a", "ns2", "x2", 14)
	if got, _ := receive(t, a, 2); !equal(names(got), []string{"x@11", "x2@14"}) {
		t.Fatalf("plane a got %v", names(got))
	}
	if got, _ := receive(t, b, 1); !equal(names(got), []string{"z@13"}) {
		t.Fatalf("plane b, namespace ns1 got %v", names(got))
	}
	if len(src.watches) != 1 {
		t.Fatalf("%d watches for two streams", len(src.watches))
	}
}

// A stream that starts behind the tap catches up from its history; one
// that starts before the history is refused as too old, and so is one the
// cache itself cannot serve.
func TestTapHistory(t *testing.T) {
	ts, src := testTaps(), newFeed(5)
	first := newSubscriber("a", "", 10)
	if err := ts.subscribe(src, &subscription{sub: first, from: 10}); err != nil {
		t.Fatal(err)
	}
	for rv := uint64(11); rv <= 16; rv++ {
		src.send(watch.Added, "a", "ns", "o"+strconv.FormatUint(rv, 10), rv)
	}
	receive(t, first, 6)
	// The history holds 13..16: a stream from 12 misses nothing.
	late := newSubscriber("a", "", 10)
	if err := ts.subscribe(src, &subscription{sub: late, from: 14}); err != nil {
		t.Fatal(err)
	}
	if got, _ := receive(t, late, 2); !equal(names(got), []string{"o15@15", "o16@16"}) {
		t.Fatalf("caught up with %v", names(got))
	}
	err := ts.subscribe(src, &subscription{sub: newSubscriber("a", "", 10), from: 11})
	var old *tooOldError
	if !errors.As(err, &old) {
		t.Fatalf("a stream from before the history: %v", err)
	}
	// A new tap (none runs for this source) from before what the cache
	// holds is refused too.
	other := newFeed(100)
	err = ts.subscribe(other, &subscription{sub: newSubscriber("a", "", 10), from: 50})
	if !errors.As(err, &old) || ts.running() != 1 {
		t.Fatalf("a tap from before the cache's history: %v (%d taps)", err, ts.running())
	}
}

// A tap starts from the oldest revision a recent snapshot handed out, so
// that a stream from that snapshot, opened later, is served.
func TestTapStartsFromHandedOutVersion(t *testing.T) {
	ts, src := testTaps(), newFeed(0)
	ts.handedOut.record(20, time.Now())
	if err := ts.subscribe(src, &subscription{sub: newSubscriber("a", "", 10), from: 30}); err != nil {
		t.Fatal(err)
	}
	if src.from[0] != 20 {
		t.Fatalf("tap started from %d, want 20", src.from[0])
	}
	src.send(watch.Added, "a", "ns", "x", 25)
	late := newSubscriber("a", "", 10)
	if err := ts.subscribe(src, &subscription{sub: late, from: 20}); err != nil {
		t.Fatal(err)
	}
	if got, _ := receive(t, late, 1); !equal(names(got), []string{"x@25"}) {
		t.Fatalf("stream from the snapshot got %v", names(got))
	}
}

// A new tap whose cache started after the revision a recent snapshot
// handed out replays from the datastore, and its streams miss nothing; a
// revision no recent snapshot handed out stays refused.
func TestTapReplaysAHandedOutRevisionFromTheDatastore(t *testing.T) {
	ts, src := testTaps(), newFeed(100)
	ts.handedOut.record(50, time.Now())
	sub := newSubscriber("a", "", 10)
	if err := ts.subscribe(src, &subscription{sub: sub, from: 50}); err != nil {
		t.Fatal(err)
	}
	if len(src.replayed) != 1 || src.replayed[0] != 50 {
		t.Fatalf("datastore watches from %v, want one from 50", src.replayed)
	}
	src.send(watch.Added, "a", "ns", "x", 60)
	if got, _ := receive(t, sub, 1); !equal(names(got), []string{"x@60"}) {
		t.Fatalf("stream from the snapshot got %v", names(got))
	}
	other := newFeed(100)
	err := ts.subscribe(other, &subscription{sub: newSubscriber("a", "", 10), from: 40})
	var old *tooOldError
	if !errors.As(err, &old) || len(other.replayed) != 0 {
		t.Fatalf("a revision older than the snapshots handed out: %v, datastore watches from %v", err, other.replayed)
	}
}

// A new tap whose cache no longer reaches back to the oldest revision
// recent snapshots handed out replays that revision from the datastore
// rather than start from its own stream's later one: a stream following
// that older snapshot, joining next, is served, not refused with 410. A
// snapshot read while the tap started sees where it did (startedAt).
func TestTapReplaysTheOldestHandedOutRevisionFirst(t *testing.T) {
	ts, src := testTaps(), newFeed(100)
	ts.handedOut.record(50, time.Now())
	if err := ts.subscribe(src, &subscription{sub: newSubscriber("b", "", 10), from: 120}); err != nil {
		t.Fatal(err)
	}
	if len(src.replayed) != 1 || src.replayed[0] != 50 {
		t.Fatalf("datastore watches from %v, want one from 50", src.replayed)
	}
	if at := ts.startedAt(src); at != 50 {
		t.Fatalf("the tap started at %d, want 50", at)
	}
	src.send(watch.Added, "a", "ns", "x", 60)
	follower := newSubscriber("a", "", 10)
	if err := ts.subscribe(src, &subscription{sub: follower, from: 50}); err != nil {
		t.Fatalf("a stream from the older snapshot: %v", err)
	}
	if got, _ := receive(t, follower, 1); !equal(names(got), []string{"x@60"}) {
		t.Fatalf("stream from the older snapshot got %v", names(got))
	}
	if at := ts.startedAt(newFeed(0)); at != 0 {
		t.Fatalf("a resource without a tap started at %d, want 0", at)
	}
}

// A stream that leaves more than its backlog unread loses its place and
// leaves the tap; the others go on.
func TestTapSlowStreamLosesItsPlace(t *testing.T) {
	ts, src := testTaps(), newFeed(0)
	slow, fast := newSubscriber("a", "", 3), newSubscriber("a", "", 100)
	for _, s := range []*subscription{{sub: slow, from: 1}, {sub: fast, from: 1}} {
		if err := ts.subscribe(src, s); err != nil {
			t.Fatal(err)
		}
	}
	for rv := uint64(2); rv <= 6; rv++ {
		src.send(watch.Added, "a", "ns", "o", rv)
	}
	// Nothing reads the slow stream until the tap has handed out all five.
	tp := runningTap(t, ts, src)
	waitFor(t, func() bool { return tp.at.Load() == 6 })
	if _, lost := slow.take(nil); lost == nil || lost.reason != "the stream was read too slowly" {
		t.Fatalf("slow stream: %+v", lost)
	}
	if got, lost := receive(t, fast, 5); lost != nil || len(got) != 5 {
		t.Fatalf("fast stream: %d events, %+v", len(got), lost)
	}
}

// A watch that ends is reopened from where the tap was; when the cache
// cannot serve that, every stream loses its place.
func TestTapReopens(t *testing.T) {
	ts, src := testTaps(), newFeed(0)
	sub := newSubscriber("a", "", 10)
	if err := ts.subscribe(src, &subscription{sub: sub, from: 1}); err != nil {
		t.Fatal(err)
	}
	src.send(watch.Added, "a", "ns", "x", 5)
	receive(t, sub, 1)
	src.current().Stop()
	waitFor(t, func() bool { src.mu.Lock(); defer src.mu.Unlock(); return len(src.watches) == 2 })
	if src.from[1] != 5 {
		t.Fatalf("reopened from %d, want 5", src.from[1])
	}
	src.send(watch.Added, "a", "ns", "y", 6)
	if got, _ := receive(t, sub, 1); !equal(names(got), []string{"y@6"}) {
		t.Fatalf("after reopening: %v", names(got))
	}
	src.mu.Lock()
	src.oldest = 100
	src.mu.Unlock()
	src.current().Stop()
	if _, lost := receive(t, sub, 100); lost == nil {
		t.Fatal("the stream kept its place though the tap could not resume")
	}
	waitFor(t, func() bool { return ts.running() == 0 })
}

// The last stream out leaves the tap lingering; it stops after that.
func TestTapLingers(t *testing.T) {
	ts, src := newTaps(tapSettings{history: 4, linger: 50 * time.Millisecond, backlog: 3}), newFeed(0)
	sub := newSubscriber("a", "", 10)
	j := &subscription{sub: sub, from: 1}
	if err := ts.subscribe(src, j); err != nil {
		t.Fatal(err)
	}
	sub.joined = append(sub.joined, j)
	sub.leave()
	if ts.running() != 1 {
		t.Fatal("the tap stopped at once")
	}
	waitFor(t, func() bool { return ts.running() == 0 })
}

// runningTap is the tap of src.
func runningTap(t *testing.T, ts *taps, src source) *tap {
	t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	tp := ts.open[src]
	if tp == nil {
		t.Fatal("no tap runs")
	}
	return tp
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRecentVersions(t *testing.T) {
	now := time.Now()
	r := newRecentVersions(time.Minute)
	r.began = now
	r.record(30, now)
	r.record(20, now.Add(time.Second))
	if got := r.oldest(now.Add(2 * time.Second)); got != 20 {
		t.Fatalf("oldest %d", got)
	}
	// Still remembered one window later, forgotten two windows later.
	r.record(40, now.Add(61*time.Second))
	if got := r.oldest(now.Add(62 * time.Second)); got != 20 {
		t.Fatalf("after one window: %d", got)
	}
	if got := r.oldest(now.Add(200 * time.Second)); got != 0 {
		t.Fatalf("after two windows: %d", got)
	}
}

func TestStreamCounter(t *testing.T) {
	c := newStreamCounter(StreamLimits{PerUser: 2, Total: 3})
	r1, err1 := c.acquire("p", "alice")
	_, err2 := c.acquire("p", "alice")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if _, err := c.acquire("p", "alice"); err == nil || !apierrors.IsTooManyRequests(err) {
		t.Fatalf("third stream of alice: %v", err)
	}
	// The same name in another plane is another identity.
	if _, err := c.acquire("q", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.acquire("q", "bob"); err == nil {
		t.Fatal("the server-wide limit let a fourth stream in")
	}
	r1()
	r1()
	if _, err := c.acquire("p", "alice"); err != nil {
		t.Fatalf("after one stream ended: %v", err)
	}
	if c.open() != 3 {
		t.Fatalf("%d open", c.open())
	}
}

func TestStreamTimeout(t *testing.T) {
	l := StreamLimits{MaxTimeout: time.Minute}
	for _, tc := range []struct{ asked, want time.Duration }{
		{0, time.Minute}, {time.Second, time.Second}, {time.Hour, time.Minute},
	} {
		if got := l.timeout(tc.asked); got != tc.want {
			t.Errorf("timeout(%s) = %s, want %s", tc.asked, got, tc.want)
		}
	}
	if got := (StreamLimits{}).timeout(0); got != DefaultMaxStreamTimeout {
		t.Errorf("default %s", got)
	}
}
