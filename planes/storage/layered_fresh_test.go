package storage

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
)

// Through a real datastore and watch cache: a member's list and get, made
// right after its template's write, hold that write, as those of a plane
// holding copies made then would. The template's layer is read from the
// cache, which is a moment behind each write.
func TestMemberListSeesTemplatesLastWrite(t *testing.T) {
	r := NewRegistry()
	ctx, s := cachedThings(t, r)
	// The member is made (and its template frozen) after each write.
	alone, made := stack{}, stack{"member": "tmpl"}
	tmpl, member := planes.WithPlane(ctx, "tmpl"), planes.WithPlane(ctx, "member")
	for i := range 50 {
		r.SetLayers(alone)
		obj := counted("tmpl", fmt.Sprintf("thing-%d", i), 0, "x")
		obj.SetNamespace("ns")
		obj.SetResourceVersion("")
		if err := s.Create(tmpl, "/things/ns/"+obj.GetName(), obj, &unstructured.Unstructured{}, 0); err != nil {
			t.Fatal(err)
		}
		r.SetLayers(made)
		list := &unstructured.UnstructuredList{}
		if err := s.GetList(member, "/things/ns", storage.ListOptions{Recursive: true, Predicate: storage.Everything}, list); err != nil {
			t.Fatal(err)
		}
		if n := meta.LenList(list); n != 2*i+1 {
			t.Fatalf("the member's list right after its template's create %d lists %d objects", 2*i+1, n)
		}
		r.SetLayers(alone)
		obj = counted("tmpl", fmt.Sprintf("other-%d", i), 0, "x")
		obj.SetNamespace("ns")
		if err := s.Create(tmpl, "/things/ns/"+obj.GetName(), obj, &unstructured.Unstructured{}, 0); err != nil {
			t.Fatal(err)
		}
		r.SetLayers(made)
		if err := s.Get(member, "/things/ns/"+obj.GetName(), storage.GetOptions{}, &unstructured.Unstructured{}); err != nil {
			t.Fatalf("the member's get right after its template's create of %s: %v", obj.GetName(), err)
		}
	}
}
