package storage

import "k8s.io/apimachinery/pkg/runtime/schema"

// SetCounts binds the counts that say which planes hold records of which
// resource (MayHold); set once by the server.
func (r *Registry) SetCounts(c *Counts) { r.counts.Store(c) }

// MayHold reports whether plane, or a template it stands on, may hold
// objects of the built-in resource: false only when the counts, caught up
// with the resource's watch cache, know that none of them has a record of
// it (Counts.Holds). Admission asks before it lists a
// plane's quotas, limit ranges, webhook configurations or policy bindings
// for a request: most planes have none, and listing nothing from the watch
// cache (the plane's layer and each template's) took 5 % of the server's
// CPU while planes were made (ARCHITECTURE.md, "Decisions worth knowing").
func (r *Registry) MayHold(plane string, resource schema.GroupResource) bool {
	c := r.counts.Load()
	if c == nil {
		return true
	}
	s := r.Storage(resource)
	if s == nil || c.Holds(s, plane) {
		return true
	}
	for _, template := range r.chain(plane) {
		if c.Holds(s, template) {
			return true
		}
	}
	return false
}

// MayHoldOwn reports whether plane's own layer may hold records of the
// resource s stores, tombstones included: false only when the counts,
// caught up with s's watch cache, know it holds none (Counts.Holds). A
// Fleet's new members hold nothing of their own, and the simulation's
// informers listing each member's own layer of every resource they follow
// took 8 % of the server's CPU while 1,000 members were made.
func (r *Registry) MayHoldOwn(plane string, s *Store) bool {
	c := r.counts.Load()
	return c == nil || c.Holds(s, plane)
}
