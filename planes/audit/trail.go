package audit

import (
	"sync"
	"time"

	"fmt"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"k8s.io/apimachinery/pkg/types"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
)

// trail is one plane's events: a ring that grows to its size with the
// plane's first events and then overwrites its oldest.
type trail struct {
	plane string
	uid   types.UID

	mu sync.Mutex
	// loaded: the plane's log has been read back (after a restart).
	loaded bool
	// closed: the plane was deleted; nothing is recorded any more.
	closed bool
	// last is the cursor of the newest event.
	last  uint64
	ring  []entry
	start int
	// changed is closed when an event is recorded; made by a reader that
	// waits (none is made while nobody follows).
	changed chan struct{}
}

// record files ev: on disk first, so that every event a reader could see
// is in the log.
func (tr *trail) record(ev *auditinternal.Event, t *Trails) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closed {
		return nil
	}
	tr.loadLocked(t)
	cursor := tr.last + 1
	line, err := t.encode(ev, cursor)
	if err != nil {
		return fmt.Errorf("encoding event %s: %w", ev.AuditID, err)
	}
	if t.disk != nil {
		if err := t.disk.append(tr.plane, tr.uid, line); err != nil {
			return err
		}
	}
	tr.last = cursor
	tr.addLocked(entry{cursor: cursor, at: ev.StageTimestamp.Time, line: line}, t.config.BufferEvents)
	if tr.changed != nil {
		close(tr.changed)
		tr.changed = nil
	}
	return nil
}

// loadLocked reads the plane's log back into the ring, once.
func (tr *trail) loadLocked(t *Trails) {
	if tr.loaded {
		return
	}
	tr.loaded = true
	if t.disk == nil {
		return
	}
	entries, err := t.disk.load(tr.plane, tr.uid, t.config.BufferEvents)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("reading the audit log of plane %s: %w", tr.plane, err))
		return
	}
	for _, e := range entries {
		tr.addLocked(e, t.config.BufferEvents)
		tr.last = e.cursor
	}
}

func (tr *trail) addLocked(e entry, size int) {
	if len(tr.ring) < size {
		tr.ring = append(tr.ring, e)
		return
	}
	tr.ring[tr.start] = e
	tr.start = (tr.start + 1) % size
}

// close ends the trail: its readers stop.
func (tr *trail) close() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.closed = true
	tr.ring = nil
	if tr.changed != nil {
		close(tr.changed)
		tr.changed = nil
	}
}

// query selects events: after a cursor, or from a time on.
type query struct {
	after uint64
	from  time.Time
	limit int
}

// page is what a read finds.
type page struct {
	entries []entry
	// last is the trail's newest cursor; oldest its oldest kept one.
	last, oldest uint64
	closed       bool
	// changed is closed on the next event (only when asked to wait).
	changed <-chan struct{}
}

// read returns the events q selects, oldest first.
func (tr *trail) read(q query, t *Trails, wait bool) page {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.loadLocked(t)
	p := page{last: tr.last, oldest: tr.last + 1, closed: tr.closed}
	if len(tr.ring) > 0 {
		p.oldest = tr.ring[tr.start].cursor
	}
	for i := range tr.ring {
		e := tr.ring[(tr.start+i)%len(tr.ring)]
		if e.cursor <= q.after || e.at.Before(q.from) {
			continue
		}
		if q.limit > 0 && len(p.entries) == q.limit {
			break
		}
		p.entries = append(p.entries, e)
	}
	if wait && !tr.closed {
		if tr.changed == nil {
			tr.changed = make(chan struct{})
		}
		p.changed = tr.changed
	}
	return p
}
