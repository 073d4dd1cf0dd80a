package gc

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func ref(uid string, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "o-" + uid, UID: types.UID(uid), BlockOwnerDeletion: &block}
}

func TestGraphKeepsPlanesApart(t *testing.T) {
	g := newGraph()
	a := &node{object: object{plane: "a", name: "dep", uid: "d1"}, owners: []metav1.OwnerReference{ref("owner", true)}}
	b := &node{object: object{plane: "b", name: "dep", uid: "d2"}, owners: []metav1.OwnerReference{ref("owner", true)}}
	if changed, _ := g.upsert(a); !changed {
		t.Fatal("new nodes must report changed owners")
	}
	if changed, _ := g.upsert(b); !changed {
		t.Fatal("new nodes must report changed owners")
	}
	if deps := g.dependentsOf("a", "owner"); len(deps) != 1 || deps[0].plane != "a" {
		t.Fatalf("dependents of a/owner: %+v", deps)
	}
	if g.hasDependents("c", "owner") {
		t.Fatal("plane c has no dependents")
	}
	g.forgetPlane("a")
	if g.hasDependents("a", "owner") || !g.hasDependents("b", "owner") {
		t.Fatal("forgetting plane a must keep plane b")
	}
}

func TestGraphOwnerChanges(t *testing.T) {
	g := newGraph()
	n := &node{object: object{plane: "p", uid: "d"}, owners: []metav1.OwnerReference{ref("o1", false)}}
	g.upsert(n)
	same := &node{object: object{plane: "p", uid: "d", name: "renamed"}, owners: []metav1.OwnerReference{ref("o1", false)}}
	if changed, _ := g.upsert(same); changed {
		t.Fatal("unchanged owners reported as changed")
	}
	blocking := &node{object: object{plane: "p", uid: "d"}, owners: []metav1.OwnerReference{ref("o1", true)}}
	if changed, old := g.upsert(blocking); !changed || old == nil || *old.owners[0].BlockOwnerDeletion {
		t.Fatal("blockOwnerDeletion change not reported with the node it replaced")
	}
	moved := &node{object: object{plane: "p", uid: "d"}, owners: []metav1.OwnerReference{ref("o2", true)}}
	g.upsert(moved)
	if g.hasDependents("p", "o1") || !g.hasDependents("p", "o2") {
		t.Fatal("dependents index not moved to the new owner")
	}
	if removed := g.remove("p", "d"); removed == nil || g.hasDependents("p", "o2") || g.size() != 0 {
		t.Fatal("remove left the node behind")
	}
}
