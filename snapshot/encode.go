package snapshot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

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

// encodings keeps the encoding of every object a snapshot wrote, by the
// resource's version and the object's uid, for as long as the object is
// unchanged and still read. An object in the watch cache never changes
// while its resourceVersion stays the same, so a plane snapshotted after
// every step of a rollout pays for converting and encoding only the
// objects that step changed. Entries not used for a while are dropped;
// past maxBytes, new encodings are not kept.
type encodings struct {
	maxBytes int64
	idle     time.Duration

	mu      sync.Mutex
	entries map[encodingKey]*encoding
	bytes   int64
	swept   time.Time
}

type encodingKey struct {
	gv  schema.GroupVersion
	uid types.UID
}

type encoding struct {
	resourceVersion string
	data            []byte
	used            time.Time
}

func newEncodings(maxBytes int64, idle time.Duration) *encodings {
	return &encodings{maxBytes: maxBytes, idle: idle, entries: map[encodingKey]*encoding{}, swept: time.Now()}
}

// encode appends obj's JSON as e writes it to buf, from the kept encoding
// when obj has not changed since.
func (c *encodings) encode(buf *bytes.Buffer, e encoder, obj runtime.Object, now time.Time) error {
	if c == nil {
		return e.encode(buf, obj)
	}
	accessor, err := meta.Accessor(obj)
	if err != nil || accessor.GetUID() == "" {
		return e.encode(buf, obj)
	}
	key := encodingKey{gv: e.gv, uid: accessor.GetUID()}
	rv := accessor.GetResourceVersion()
	c.mu.Lock()
	if kept, ok := c.entries[key]; ok && kept.resourceVersion == rv {
		kept.used = now
		buf.Write(kept.data)
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()

	start := buf.Len()
	if err := e.encode(buf, obj); err != nil {
		return err
	}
	data := bytes.Clone(buf.Bytes()[start:])
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[key]; ok {
		c.bytes -= int64(len(old.data))
		delete(c.entries, key)
	}
	if c.bytes+int64(len(data)) <= c.maxBytes {
		c.entries[key] = &encoding{resourceVersion: rv, data: data, used: now}
		c.bytes += int64(len(data))
	}
	return nil
}

// sweep drops the encodings no snapshot used for the idle time, at most
// once per idle time.
func (c *encodings) sweep(now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.swept) < c.idle {
		return
	}
	c.swept = now
	for key, e := range c.entries {
		if now.Sub(e.used) > c.idle {
			c.bytes -= int64(len(e.data))
			delete(c.entries, key)
		}
	}
}
