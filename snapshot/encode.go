package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kplane.dev/kplane/planes"
)

// encoder writes cached objects of one resource as a client of the plane
// sees them: converted to the resource's preferred version, with apiVersion
// and kind, without managed fields and without the server-internal plane
// annotation. Cached objects are shared by every reader of the watch cache:
// the encoder never modifies them, it edits only what it created (the
// converted object, or a shallow copy of a custom resource's maps).
type encoder struct {
	gv schema.GroupVersion
	// scheme converts built-in objects from their internal version; nil for
	// custom resources, which are cached as unstructured objects.
	scheme *runtime.Scheme
}

// external returns obj as the client sees it, ready to be marshalled.
func (e encoder) external(obj runtime.Object) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return e.externalUnstructured(u), nil
	}
	if e.scheme == nil {
		return nil, fmt.Errorf("cannot encode %T as %s", obj, e.gv)
	}
	// Converting an internal object always builds a new object; nested
	// fields may still be shared with the cached one, so only top-level
	// fields of its ObjectMeta (a value of the new object) are replaced.
	out, err := e.scheme.ConvertToVersion(obj, e.gv)
	if err != nil {
		return nil, fmt.Errorf("converting %T to %s: %w", obj, e.gv, err)
	}
	if out == obj {
		return nil, fmt.Errorf("converting %T to %s returned the cached object", obj, e.gv)
	}
	accessor, err := meta.Accessor(out)
	if err != nil {
		return nil, err
	}
	accessor.SetManagedFields(nil)
	if annotations := accessor.GetAnnotations(); annotations != nil {
		accessor.SetAnnotations(withoutPlane(annotations))
	}
	return out, nil
}

func (e encoder) externalUnstructured(u *unstructured.Unstructured) map[string]any {
	out := make(map[string]any, len(u.Object))
	for k, v := range u.Object {
		out[k] = v
	}
	out["apiVersion"] = e.gv.String()
	metadata, ok := u.Object["metadata"].(map[string]any)
	if !ok {
		return out
	}
	md := make(map[string]any, len(metadata))
	for k, v := range metadata {
		md[k] = v
	}
	delete(md, "managedFields")
	if annotations, ok := metadata["annotations"].(map[string]any); ok {
		kept := make(map[string]any, len(annotations))
		for k, v := range annotations {
			if k != planes.Annotation {
				kept[k] = v
			}
		}
		if len(kept) == 0 {
			delete(md, "annotations")
		} else {
			md["annotations"] = kept
		}
	}
	out["metadata"] = md
	return out
}

// withoutPlane returns annotations without the plane annotation (nil when
// nothing else is left), leaving the argument untouched.
func withoutPlane(annotations map[string]string) map[string]string {
	if _, ok := annotations[planes.Annotation]; !ok {
		return annotations
	}
	if len(annotations) == 1 {
		return nil
	}
	kept := make(map[string]string, len(annotations)-1)
	for k, v := range annotations {
		if k != planes.Annotation {
			kept[k] = v
		}
	}
	return kept
}

// encode appends obj's JSON (no trailing newline) to buf.
func (e encoder) encode(buf *bytes.Buffer, obj runtime.Object) error {
	out, err := e.external(obj)
	if err != nil {
		return err
	}
	return writeJSON(buf, out)
}

// writeJSON appends v's JSON without the newline json.Encoder adds.
func writeJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 1)
	return nil
}
