package lifecycle

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A busy plane's status is not rewritten for every byte: only a change of
// objects or watches, or of bytes by more than 1/32, is written.
func TestUsageChanged(t *testing.T) {
	last := Usage{Objects: 10, Bytes: 32000, Watches: 1}
	for _, c := range []struct {
		now  Usage
		want bool
	}{
		{last, false},
		{Usage{Objects: 10, Bytes: 32500, Watches: 1}, false},
		{Usage{Objects: 10, Bytes: 31500, Watches: 1}, false},
		{Usage{Objects: 10, Bytes: 33001, Watches: 1}, true},
		{Usage{Objects: 10, Bytes: 30999, Watches: 1}, true},
		{Usage{Objects: 11, Bytes: 32000, Watches: 1}, true},
		{Usage{Objects: 10, Bytes: 32000, Watches: 2}, true},
	} {
		if got := usageChanged(last, c.now); got != c.want {
			t.Errorf("usageChanged(%+v, %+v) = %v, want %v", last, c.now, got, c.want)
		}
	}
	if !usageChanged(Usage{}, Usage{Bytes: 1}) {
		t.Error("bytes from none: want a write")
	}
}

// A plane's usage is written once it holds still for a pass, or once the
// status is older than the longest wait while it keeps changing; a usage
// the status already says is never written again.
func TestUsageWrittenOnceSettled(t *testing.T) {
	const interval = 10 * time.Second
	start := time.Unix(1000, 0)
	var r usageReport
	r.stored(Usage{Objects: 8}, start)
	passes := []struct {
		now  Usage
		want bool
	}{
		{Usage{Objects: 8}, false}, // as written
		{Usage{Objects: 9}, false}, // changing
		{Usage{Objects: 9}, true},  // held still for a pass
	}
	for i, p := range passes {
		at := start.Add(time.Duration(i+1) * interval)
		if got := r.due(p.now, at, 3*interval); got != p.want {
			t.Fatalf("pass %d at %+v: due %v, want %v", i, p.now, got, p.want)
		}
		if p.want {
			r.stored(p.now, at)
		}
	}
	if r.due(Usage{Objects: 9}, start.Add(4*interval), 3*interval) {
		t.Fatal("written usage due again")
	}
	// Changing at every pass: written once the status is 3 intervals old.
	written := start.Add(3 * interval)
	for i := 1; i <= 3; i++ {
		at := written.Add(time.Duration(i) * interval)
		want := i == 3
		if got := r.due(Usage{Objects: int64(20 + i)}, at, 3*interval); got != want {
			t.Fatalf("changing, pass %d: due %v, want %v", i, got, want)
		}
	}
	// The stored status of another writer (a restart, another server)
	// counts as written when seen.
	var other usageReport
	other.stored(Usage{Objects: 1}, start)
	other.stored(Usage{Objects: 5}, start.Add(time.Minute))
	if other.due(Usage{Objects: 5}, start.Add(2*time.Minute), 3*interval) {
		t.Fatal("usage another writer stored is due")
	}
}

// An annotation is read in place, whatever shape the metadata has.
func TestAnnotationReadsInPlace(t *testing.T) {
	for _, c := range []struct {
		object    map[string]any
		value     string
		annotated bool
	}{
		{map[string]any{}, "", false},
		{map[string]any{"metadata": "not a map"}, "", false},
		{map[string]any{"metadata": map[string]any{}}, "", false},
		{map[string]any{"metadata": map[string]any{"annotations": map[string]any{"other": "x"}}}, "", false},
		{map[string]any{"metadata": map[string]any{"annotations": map[string]any{"k": ""}}}, "", true},
		{map[string]any{"metadata": map[string]any{"annotations": map[string]any{"k": "v"}}}, "v", true},
	} {
		value, annotated := annotation(&unstructured.Unstructured{Object: c.object}, "k")
		if value != c.value || annotated != c.annotated {
			t.Errorf("%v: got %q, %v; want %q, %v", c.object, value, annotated, c.value, c.annotated)
		}
	}
}
