package crds

import (
	"crypto/sha256"
	"encoding/json"
	goruntime "runtime"
	"sync"
	"unsafe"
	"weak"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apimachinery/pkg/runtime"
)

// Schemas shares identical CRD schemas between the CRD objects the watch
// cache holds. RL fleets install the same CRDs in every plane; without it
// each plane's copy of a 50 KB schema costs about a megabyte of decoded
// structures, held once per plane and once more per version in the cache's
// event history.
//
// Interned schemas are read-only: the cache's objects are never modified
// (writes and updates work on deep copies), and nothing here is handed to
// code that would.
type Schemas struct {
	mu     sync.Mutex
	byHash map[[32]byte]weak.Pointer[apiextensionsinternal.JSONSchemaProps]
	// fields interns the managed-fields sets, which list every field of the
	// schema and are identical for identical CRDs applied the same way.
	fields map[[32]byte]weak.Pointer[byte]
}

// NewSchemas returns an empty intern table.
func NewSchemas() *Schemas {
	return &Schemas{
		byHash: map[[32]byte]weak.Pointer[apiextensionsinternal.JSONSchemaProps]{},
		fields: map[[32]byte]weak.Pointer[byte]{},
	}
}

// Intern replaces, in place, every schema of a freshly decoded CRD by the
// identical one already held, if any. It is a storage.Transform.
func (s *Schemas) Intern(obj runtime.Object) {
	crd, ok := obj.(*apiextensionsinternal.CustomResourceDefinition)
	if !ok {
		return
	}
	if v := crd.Spec.Validation; v != nil && v.OpenAPIV3Schema != nil {
		v.OpenAPIV3Schema = s.intern(v.OpenAPIV3Schema)
	}
	for i := range crd.Spec.Versions {
		if v := crd.Spec.Versions[i].Schema; v != nil && v.OpenAPIV3Schema != nil {
			v.OpenAPIV3Schema = s.intern(v.OpenAPIV3Schema)
		}
	}
	for i := range crd.ManagedFields {
		if f := crd.ManagedFields[i].FieldsV1; f != nil && len(f.Raw) > 256 {
			f.Raw = s.internBytes(f.Raw)
		}
	}
}

// internBytes returns the held byte slice equal to raw, if any. The weak
// pointer is to the first byte: it keeps track of the backing array, which
// lives as long as any object's slice points into it.
func (s *Schemas) internBytes(raw []byte) []byte {
	key := sha256.Sum256(raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := s.fields[key].Value(); held != nil {
		return unsafe.Slice(held, len(raw))
	}
	first := &raw[0]
	s.fields[key] = weak.Make(first)
	goruntime.AddCleanup(first, func(k [32]byte) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.fields[k].Value() == nil {
			delete(s.fields, k)
		}
	}, key)
	return raw
}

func (s *Schemas) intern(schema *apiextensionsinternal.JSONSchemaProps) *apiextensionsinternal.JSONSchemaProps {
	data, err := json.Marshal(schema)
	if err != nil {
		return schema
	}
	key := sha256.Sum256(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := s.byHash[key].Value(); held != nil {
		return held
	}
	s.byHash[key] = weak.Make(schema)
	// Forget the entry once no object holds the schema anymore.
	goruntime.AddCleanup(schema, func(k [32]byte) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.byHash[k].Value() == nil {
			delete(s.byHash, k)
		}
	}, key)
	return schema
}
