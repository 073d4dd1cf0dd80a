package storage

import (
	"io"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage/storagebackend"
)

func codecOf(config *storagebackend.ConfigForResource) runtime.Codec {
	if config == nil {
		return nil
	}
	return config.Codec
}

// EncodedSize is the number of bytes obj takes in the datastore: its
// encoding with the resource's storage codec (protobuf or JSON), as a write
// stores it. Custom resources are JSON: their size is measured without the
// codec, which would set the version on the cache's shared object.
func (s *Store) EncodedSize(obj runtime.Object) int64 {
	// A watch event's object is the cacher's serialization wrapper: its
	// copy of the object, never the wrapper itself, whose lock a shallow
	// copy would take along (copied while another watcher encoded the
	// event, it stayed locked, and the counting watch stood still).
	if c, ok := obj.(runtime.CacheableObject); ok {
		obj = c.GetObject()
	}
	if u, ok := obj.(runtime.Unstructured); ok {
		// The length of json.Encoder's output, its newline included.
		return jsonSize(u.UnstructuredContent()) + 1
	}
	if s.codec == nil {
		return 0
	}
	var n countingWriter
	if err := s.codec.Encode(shallowCopy(obj), &n); err != nil {
		return 0
	}
	return int64(n)
}

// shallowCopy copies the top-level struct of obj: the codec sets and
// restores the kind on what it encodes, which must not be the cache's
// shared object; nothing deeper is written.
func shallowCopy(obj runtime.Object) runtime.Object {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return obj.DeepCopyObject()
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	return c.Interface().(runtime.Object)
}

// countingWriter counts what is written to it and keeps nothing.
type countingWriter int64

var _ io.Writer = (*countingWriter)(nil)

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}
