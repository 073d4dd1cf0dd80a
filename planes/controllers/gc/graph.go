package gc

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// uidKey is an object's identity within its plane.
type uidKey struct {
	plane string
	uid   types.UID
}

// node is an object that has ownerReferences.
type node struct {
	object
	owners []metav1.OwnerReference
}

// object locates an object of a plane.
type object struct {
	plane     string
	resource  schema.GroupResource
	namespace string
	name      string
	uid       types.UID
}

// graph maps owners to the dependents that name them, per plane.
type graph struct {
	mu         sync.Mutex
	nodes      map[uidKey]*node
	dependents map[uidKey]map[types.UID]struct{}
}

func newGraph() *graph {
	return &graph{nodes: map[uidKey]*node{}, dependents: map[uidKey]map[types.UID]struct{}{}}
}

// upsert records n (which has owners) and reports whether its owners
// changed since it was last seen, and the node it replaced (nil if new).
func (g *graph) upsert(n *node) (bool, *node) {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := uidKey{n.plane, n.uid}
	old := g.nodes[key]
	if old != nil && sameOwners(old.owners, n.owners) {
		old.object = n.object
		return false, old
	}
	if old != nil {
		g.unlinkLocked(old)
	}
	g.nodes[key] = n
	for _, o := range n.owners {
		ok := uidKey{n.plane, o.UID}
		deps := g.dependents[ok]
		if deps == nil {
			deps = map[types.UID]struct{}{}
			g.dependents[ok] = deps
		}
		deps[n.uid] = struct{}{}
	}
	return true, old
}

// remove forgets the object with uid and returns it if it was a node.
func (g *graph) remove(plane string, uid types.UID) *node {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := uidKey{plane, uid}
	n := g.nodes[key]
	if n != nil {
		g.unlinkLocked(n)
		delete(g.nodes, key)
	}
	return n
}

func (g *graph) unlinkLocked(n *node) {
	for _, o := range n.owners {
		ok := uidKey{n.plane, o.UID}
		if deps := g.dependents[ok]; deps != nil {
			delete(deps, n.uid)
			if len(deps) == 0 {
				delete(g.dependents, ok)
			}
		}
	}
}

// dependentsOf returns the nodes that name (plane, owner) as an owner.
func (g *graph) dependentsOf(plane string, owner types.UID) []*node {
	g.mu.Lock()
	defer g.mu.Unlock()
	deps := g.dependents[uidKey{plane, owner}]
	out := make([]*node, 0, len(deps))
	for uid := range deps {
		if n := g.nodes[uidKey{plane, uid}]; n != nil {
			out = append(out, n)
		}
	}
	return out
}

// hasDependents reports whether anything names (plane, owner).
func (g *graph) hasDependents(plane string, owner types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.dependents[uidKey{plane, owner}]) > 0
}

// node returns the node of (plane, uid), if any.
func (g *graph) node(plane string, uid types.UID) *node {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.nodes[uidKey{plane, uid}]
}

// ownedFromGroup returns the nodes with an owner of API group.
func (g *graph) ownedFromGroup(group string) []*node {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*node
	for _, n := range g.nodes {
		for _, o := range n.owners {
			if gv, err := schema.ParseGroupVersion(o.APIVersion); err == nil && gv.Group == group {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

// forgetPlane drops every node of plane.
func (g *graph) forgetPlane(plane string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, n := range g.nodes {
		if key.plane == plane {
			g.unlinkLocked(n)
			delete(g.nodes, key)
		}
	}
}

func (g *graph) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.nodes)
}

func sameOwners(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID || a[i].Kind != b[i].Kind || a[i].APIVersion != b[i].APIVersion ||
			a[i].Name != b[i].Name || !boolEq(a[i].BlockOwnerDeletion, b[i].BlockOwnerDeletion) {
			return false
		}
	}
	return true
}

func boolEq(a, b *bool) bool {
	return (a != nil && *a) == (b != nil && *b)
}
