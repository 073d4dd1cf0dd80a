package storage

import (
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// lockedWrapper stands for the cacher's serialization wrapper of a watch
// event while another watcher encodes it: its lock is held.
type lockedWrapper struct {
	mu     sync.RWMutex
	object runtime.Object
}

func (w *lockedWrapper) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (w *lockedWrapper) DeepCopyObject() runtime.Object   { return w }
func (w *lockedWrapper) GetObject() runtime.Object        { return w.object.DeepCopyObject() }
func (w *lockedWrapper) CacheEncode(_ runtime.Identifier, encode func(runtime.Object, io.Writer) error, out io.Writer) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return encode(w.object, out)
}

// TestEncodedSizeOfAWatchEventBeingEncoded: the size of a cached event's
// object is measured on its own copy, never by way of the wrapper, whose
// lock another watcher may hold (a shallow copy of the wrapper took the
// held lock along and the counting watch stood still for good).
func TestEncodedSizeOfAWatchEventBeingEncoded(t *testing.T) {
	s := &Store{}
	object := counted("a", "one", 2, strings.Repeat("x", 100))
	w := &lockedWrapper{object: object}
	w.mu.Lock()
	defer w.mu.Unlock()
	got := make(chan int64, 1)
	go func() { got <- s.EncodedSize(w) }()
	select {
	case size := <-got:
		if want := s.EncodedSize(object); size != want || size == 0 {
			t.Fatalf("size %d, want %d", size, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("EncodedSize waited on the wrapper's lock")
	}
}
