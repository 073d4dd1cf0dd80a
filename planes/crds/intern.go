package crds

import (
	"crypto/sha256"
	"encoding/json"
	goruntime "runtime"
	"sync"
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
}

// NewSchemas returns an empty intern table.
func NewSchemas() *Schemas {
	return &Schemas{byHash: map[[32]byte]weak.Pointer[apiextensionsinternal.JSONSchemaProps]{}}
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
