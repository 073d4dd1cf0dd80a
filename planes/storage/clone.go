package storage

import (
	"context"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage"
)

// CopyLayer writes the records plane from held at datastore revision rev
// as records of plane to, tombstones and layer marks included, and returns
// how many it wrote. A clone made this way over the same templates as its
// source serves exactly what the source served at rev.
//
// Reading at one revision for every resource, rather than holding the
// source, gives one consistent moment without ending the source's watches
// or making its clients wait.
func (s *Store) CopyLayer(ctx context.Context, from, to string, rev uint64) (int, error) {
	records, _, err := s.layerList(ctx, from, s.resourcePrefix, storage.ListOptions{
		Recursive:            true,
		ResourceVersion:      strconv.FormatUint(rev, 10),
		ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	})
	if err != nil {
		return 0, fmt.Errorf("reading %s of plane %s at revision %d: %w", s.resource, from, rev, err)
	}
	s.registry.noteWrite(to, s.resourcePrefix)
	for key, obj := range records {
		// Read at an exact revision, the records come from the datastore,
		// not a cache: they are this call's to change.
		state := layerState(obj)
		if err := s.Versioner().PrepareObjectForStorage(obj); err != nil {
			return 0, err
		}
		if err := markWrite(obj, to, state); err != nil {
			return 0, err
		}
		scoped, err := scopeKey(s.resourcePrefix, to, key)
		if err != nil {
			return 0, err
		}
		if err := s.Interface.Create(ctx, scoped, obj, s.newFunc(), 0); err != nil {
			return 0, fmt.Errorf("copying %s to plane %s: %w", key, to, err)
		}
	}
	return len(records), nil
}
