package storage

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	api "k8s.io/kubernetes/pkg/apis/core"

	"kplane.dev/kplane/planes"
)

// A tracked plane's writes are noted per resource, from the moment it is
// tracked; an untracked plane's are not, and forgetting ends tracking.
func TestWrittenResources(t *testing.T) {
	r := NewRegistry()
	configMaps := buildStore(t, r, schema.GroupResource{Resource: "configmaps"}, "/configmaps", "")
	secrets := buildStore(t, r, schema.GroupResource{Resource: "secrets"}, "/secrets", "")
	create := func(s *Store, plane string) {
		t.Helper()
		ctx := planes.WithPlane(context.Background(), plane)
		if err := s.Create(ctx, s.ResourcePrefix()+"/ns/x", &api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}}, &api.ConfigMap{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	create(configMaps, "a")
	if _, tracked := r.Written("a"); tracked {
		t.Fatal("a plane is tracked before TrackWrites")
	}
	r.TrackWrites("a")
	if written, tracked := r.Written("a"); !tracked || len(written) != 0 {
		t.Fatalf("a plane tracked from now: %v, %v", written, tracked)
	}
	create(secrets, "a")
	create(configMaps, "b")
	written, _ := r.Written("a")
	if _, ok := written["/secrets"]; !ok || len(written) != 1 {
		t.Fatalf("written %v, want /secrets only", written)
	}
	if _, tracked := r.Written("b"); tracked {
		t.Fatal("another plane's write started its tracking")
	}
	r.TrackWrites("a")
	if written, _ := r.Written("a"); len(written) != 0 {
		t.Fatalf("tracking again starts from nothing: %v", written)
	}
	r.ForgetWrites("a")
	if _, tracked := r.Written("a"); tracked {
		t.Fatal("a forgotten plane is still tracked")
	}
}
