package lifecycle

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A status write merges as the merge patch it replaces did: maps key by
// key, other values replaced, fields it does not name kept.
func TestMergeStatus(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
		"phase": "Ready", "bootstrappedAt": "t0", "objectCount": int64(3),
		"usage": map[string]any{"objects": int64(3), "bytes": int64(10), "watches": int64(1)},
	}}}
	mergeStatus(u, map[string]any{"objectCount": int64(5), "usage": map[string]any{"objects": int64(5), "bytes": int64(20)}})
	want := map[string]any{
		"phase": "Ready", "bootstrappedAt": "t0", "objectCount": int64(5),
		"usage": map[string]any{"objects": int64(5), "bytes": int64(20), "watches": int64(1)},
	}
	if !reflect.DeepEqual(u.Object["status"], want) {
		t.Errorf("status %v, want %v", u.Object["status"], want)
	}
	fresh := &unstructured.Unstructured{Object: map[string]any{}}
	mergeStatus(fresh, map[string]any{"phase": "Terminating"})
	if !reflect.DeepEqual(fresh.Object["status"], map[string]any{"phase": "Terminating"}) {
		t.Errorf("status of a Plane without one: %v", fresh.Object["status"])
	}
}
