package lifecycle

import (
	"testing"

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
