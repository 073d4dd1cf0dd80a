package storage

import (
	"crypto/sha256"
	"encoding/json"
	"runtime"
	"sync"
	"unsafe"
	"weak"
)

// Interner shares identical, read-only parts between objects of many
// planes. Every plane starts with the same bootstrap objects and RL fleets
// create the same objects in every plane: held once, they cost a plane a
// pointer instead of a copy. Entries are weak: a part nothing uses anymore
// is collected.
type Interner struct {
	mu      sync.Mutex
	entries map[[32]byte]weak.Pointer[byte]
}

// NewInterner returns an empty table.
func NewInterner() *Interner {
	return &Interner{entries: map[[32]byte]weak.Pointer[byte]{}}
}

// Slice returns a slice equal to s (compared by its JSON form) that is
// already held, or s itself, which is held from now on. s and the result
// must never be modified.
func Slice[T any](in *Interner, s []T) []T {
	if len(s) == 0 {
		return s
	}
	data, err := json.Marshal(s)
	if err != nil {
		return s
	}
	// The element type is part of the key: equal JSON of different types
	// must not share memory.
	key := sha256.Sum256(append(data, []byte(typeName[T]())...))
	in.mu.Lock()
	defer in.mu.Unlock()
	if held := in.entries[key].Value(); held != nil {
		return unsafe.Slice((*T)(unsafe.Pointer(held)), len(s))
	}
	first := (*byte)(unsafe.Pointer(&s[0]))
	in.entries[key] = weak.Make(first)
	runtime.AddCleanup(&s[0], func(k [32]byte) {
		in.mu.Lock()
		defer in.mu.Unlock()
		if in.entries[k].Value() == nil {
			delete(in.entries, k)
		}
	}, key)
	return s
}

func typeName[T any]() string {
	var zero T
	b, _ := json.Marshal(struct{ T any }{zero})
	return string(b)
}
