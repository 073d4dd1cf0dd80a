package crds

import (
	"testing"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"

	"kplane.dev/kplane/planes"
)

// inPlane returns the CRD of the test data as stored for plane.
func inPlane(t *testing.T, plane string) *apiextensionsinternal.CustomResourceDefinition {
	t.Helper()
	crd := loadCRD(t)
	crd.Annotations = map[string]string{planes.Annotation: plane}
	return crd
}

// A content hash is released only when no CRD has it anymore: an update
// that keeps the spec, as the conditions controller's status writes do,
// must leave its handler (and the watches it serves) in place.
func TestIndexReleasesOnlyUnusedContent(t *testing.T) {
	x := NewIndex()
	var released []string
	x.onUnused = func(hash string) { released = append(released, hash) }

	a := inPlane(t, "a")
	x.Upsert(a)
	relabeled := inPlane(t, "a")
	relabeled.Labels = map[string]string{"touched": "yes"}
	relabeled.Status.StoredVersions = []string{"v1"}
	x.Upsert(relabeled)
	if len(released) != 0 {
		t.Fatalf("an update keeping the spec released %v", released)
	}

	x.Upsert(inPlane(t, "b"))
	x.Delete(inPlane(t, "a"))
	if len(released) != 0 {
		t.Fatalf("deleting plane a's CRD released %v while plane b still has it", released)
	}

	old, _ := x.Get("b", a.Name)
	changed := inPlane(t, "b")
	changed.Spec.Names.ShortNames = append(changed.Spec.Names.ShortNames, "another")
	x.Upsert(changed)
	if len(released) != 1 || released[0] != old.hash {
		t.Fatalf("a spec change released %v, want [%s]", released, old.hash)
	}
	x.Delete(changed)
	if len(released) != 2 || released[1] == old.hash {
		t.Fatalf("deleting the last CRD released %v", released)
	}
}
