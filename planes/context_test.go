package planes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// OfObject reads the plane annotation of typed objects and of custom
// resources alike, and "" where there is none.
func TestOfObject(t *testing.T) {
	annotated := &unstructured.Unstructured{}
	annotated.SetAnnotations(map[string]string{"other": "x", Annotation: "p1"})
	unannotated := &unstructured.Unstructured{}
	unannotated.SetName("n")
	malformed := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"annotations": "not a map"}}}
	for _, c := range []struct {
		name string
		obj  runtime.Object
		want string
	}{
		{"typed", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{Annotation: "p2"}}}, "p2"},
		{"typed without", &corev1.ConfigMap{}, ""},
		{"unstructured", annotated, "p1"},
		{"unstructured without annotations", unannotated, ""},
		{"unstructured without metadata", &unstructured.Unstructured{Object: map[string]any{}}, ""},
		{"unstructured with malformed annotations", malformed, ""},
		{"a list", &corev1.ConfigMapList{}, ""},
	} {
		if got := OfObject(c.obj); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if got := AnnotationOf(annotated, "other"); got != "x" {
		t.Errorf("another annotation: %q, want x", got)
	}
	if annotated.GetAnnotations()["other"] != "x" {
		t.Error("the object's annotations changed")
	}
}
