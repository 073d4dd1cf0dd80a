package limits

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	planestorage "kplane.dev/kplane/planes/storage"
)

// planeSpecs are Plane.spec.limits by plane, as the lifecycle reports them.
type planeSpecs map[string]*Limits

func (p planeSpecs) Limits(plane string) *Limits { return p[plane] }
func (p planeSpecs) Watches(string) int          { return 0 }

func ptr[T any](v T) *T { return &v }

func TestOverTakesDefaultsAndBurst(t *testing.T) {
	defaults := Effective{MaxObjects: 10, RequestsPerSecond: 5, RequestBurst: 50}
	cases := []struct {
		spec *Limits
		want Effective
	}{
		{nil, defaults},
		{&Limits{MaxObjects: ptr[int64](0)}, Effective{RequestsPerSecond: 5, RequestBurst: 50}},
		// A plane's own rate does not take the default's burst.
		{&Limits{RequestsPerSecond: ptr[int32](2)}, Effective{MaxObjects: 10, RequestsPerSecond: 2, RequestBurst: 2}},
		{&Limits{RequestsPerSecond: ptr[int32](2), RequestBurst: ptr[int32](7)}, Effective{MaxObjects: 10, RequestsPerSecond: 2, RequestBurst: 7}},
	}
	for _, c := range cases {
		if got := defaults.Over(c.spec); got != c.want {
			t.Errorf("Over(%+v) = %+v, want %+v", c.spec, got, c.want)
		}
	}
	if got := (Effective{RequestsPerSecond: 3}).Over(nil); got.RequestBurst != 3 {
		t.Errorf("a default rate without burst gets burst %d, want 3", got.RequestBurst)
	}
}

func TestValidateFlags(t *testing.T) {
	for _, bad := range []Effective{{MaxObjects: -1}, {RequestBurst: 3}, {MaxWatches: 2_000_000}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := (Effective{MaxObjects: 1, RequestsPerSecond: 1, RequestBurst: 2}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestRateRefusalSaysWhenToRetry: past the burst a request is refused
// with 429 and a retry delay; another plane has its own bucket.
func TestRateRefusalSaysWhenToRetry(t *testing.T) {
	e := New(Config{Counts: planestorage.NewCounts()})
	l := Effective{RequestsPerSecond: 1, RequestBurst: 2}
	for range 2 {
		if err := e.admitRate("a", l); err != nil {
			t.Fatal(err)
		}
	}
	err := e.admitRate("a", l)
	var status apierrors.APIStatus
	if !apierrors.IsTooManyRequests(err) || !errors.As(err, &status) || status.Status().Details == nil ||
		status.Status().Details.RetryAfterSeconds < 1 {
		t.Fatalf("third request at once: want 429 with a retry delay, got %v", err)
	}
	if err := e.admitRate("b", l); err != nil {
		t.Fatalf("plane b limited by a's requests: %v", err)
	}
}

// TestReserveCountsWritesInFlight: writes in flight count against the
// limit until released, and only in their own plane; the refusal names
// the limit and the usage.
func TestReserveCountsWritesInFlight(t *testing.T) {
	e := New(Config{Counts: planestorage.NewCounts()})
	e.Bind(planeSpecs{"a": {MaxObjects: ptr[int64](2)}, "b": {MaxObjects: ptr[int64](1)}})
	s := &planestorage.Store{}
	ctx := context.Background()
	var releases []func(uint64)
	for range 2 {
		release, err := e.Reserve(ctx, s, "a", "/configmaps/a/default/x", 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	_, err := e.Reserve(ctx, s, "a", "/configmaps/a/default/x", 1, 0)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "used: objects=2, limited: maxObjects=2") {
		t.Fatalf("third write in flight: %v", err)
	}
	if release, err := e.Reserve(ctx, s, "b", "/configmaps/b/default/x", 1, 0); err != nil {
		t.Fatalf("plane b refused for a's writes: %v", err)
	} else {
		release(0)
	}
	for _, release := range releases {
		release(0)
	}
	if len(e.reserved) != 0 {
		t.Fatalf("reservations kept after their release: %v", e.reserved)
	}
	if release, err := e.Reserve(ctx, s, "a", "/configmaps/a/default/x", 1, 0); err != nil {
		t.Fatalf("after the releases: %v", err)
	} else {
		release(0)
	}
}

// TestReservationHeldUntilCounted: a stored write's reservation stays
// until the counters hold its revision, however long they lag.
func TestReservationHeldUntilCounted(t *testing.T) {
	counts := planestorage.NewCounts()
	e := New(Config{Counts: counts})
	e.Bind(planeSpecs{"a": {MaxObjects: ptr[int64](1)}})
	s := &planestorage.Store{}
	release, err := e.Reserve(context.Background(), s, "a", "/configmaps/a/default/x", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	release(7)
	if _, err := e.Reserve(context.Background(), s, "a", "/configmaps/a/default/y", 1, 0); !apierrors.IsForbidden(err) {
		t.Fatalf("a write stored but not yet counted was forgotten: %v", err)
	}
}
