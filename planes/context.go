package planes

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

type planeKey struct{}

// WithPlane returns a copy of ctx that carries the plane id. The routing
// filter does this once per request; the storage layer refuses any call whose
// context has no plane.
func WithPlane(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, planeKey{}, id)
}

// FromContext returns the plane carried by ctx.
func FromContext(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(planeKey{}).(string)
	return id, ok && id != ""
}

type allPlanesKey struct{}

// WithAllPlanes returns a copy of ctx that lets a storage list or watch
// cover every plane of a resource at once. Only in-process components
// (controllers, the snapshot cache) use it; nothing on the HTTP path ever
// sets it, so no request can see across planes.
func WithAllPlanes(ctx context.Context) context.Context {
	return context.WithValue(ctx, allPlanesKey{}, true)
}

// AllPlanes reports whether ctx asks for the cross-plane view.
func AllPlanes(ctx context.Context) bool {
	all, _ := ctx.Value(allPlanesKey{}).(bool)
	return all
}

// OfObject returns the plane recorded on a stored object, or "" when the
// object carries no plane annotation.
func OfObject(obj runtime.Object) string { return AnnotationOf(obj, Annotation) }

// AnnotationOf returns obj's annotation key, or "" when it has none.
func AnnotationOf(obj runtime.Object, key string) string {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		// Looked up in place: the accessor's GetAnnotations copies every
		// annotation of a custom resource, which every follower of a cache
		// did for every object (a restart's 10,000 Planes: nearly half of
		// the controllers' first list).
		metadata, _ := u.Object["metadata"].(map[string]any)
		annotations, _ := metadata["annotations"].(map[string]any)
		value, _ := annotations[key].(string)
		return value
	}
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return accessor.GetAnnotations()[key]
}
