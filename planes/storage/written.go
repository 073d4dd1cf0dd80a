package storage

import "sync"

// writtenResources remembers, for the planes that asked, the resources
// each has written since it asked: where its own records can be. A reset
// deletes a plane's own records; listing every resource of the plane to
// find them (one consistent datastore list each, about 60) was most of a
// reset's time, while an episode between two resets writes a handful.
//
// It is exact only where every write to a plane goes through this
// registry's stores: a server alone on its datastore. The lifecycle uses
// it there only, and lists everything where it does not know (the first
// reset after a start, several servers).
type writtenResources struct {
	mu sync.Mutex
	// planes maps a tracked plane to the resource prefixes it wrote.
	planes map[string]map[string]struct{}
}

// noteWrite records that plane wrote (or is about to write) under prefix.
// Noted before the write is tried, a refused write only widens the set.
func (r *Registry) noteWrite(plane, prefix string) {
	if r == nil {
		// A Store made outside a registry tracks nothing.
		return
	}
	w := &r.written
	w.mu.Lock()
	defer w.mu.Unlock()
	if set, tracked := w.planes[plane]; tracked {
		set[prefix] = struct{}{}
	}
}

// TrackWrites starts remembering the resources plane writes, from
// nothing: its caller knows the plane has no own record now (it has just
// deleted them, and nothing writes meanwhile).
func (r *Registry) TrackWrites(plane string) {
	r.written.mu.Lock()
	defer r.written.mu.Unlock()
	if r.written.planes == nil {
		r.written.planes = map[string]map[string]struct{}{}
	}
	r.written.planes[plane] = map[string]struct{}{}
}

// ForgetWrites stops remembering plane's writes (the plane is deleted, or
// its records were written behind the stores' back).
func (r *Registry) ForgetWrites(plane string) {
	r.written.mu.Lock()
	defer r.written.mu.Unlock()
	delete(r.written.planes, plane)
}

// Written reports the resource prefixes plane wrote since TrackWrites, and
// false when its writes are not tracked.
func (r *Registry) Written(plane string) (map[string]struct{}, bool) {
	r.written.mu.Lock()
	defer r.written.mu.Unlock()
	set, tracked := r.written.planes[plane]
	if !tracked {
		return nil, false
	}
	out := make(map[string]struct{}, len(set))
	for prefix := range set {
		out[prefix] = struct{}{}
	}
	return out, true
}
