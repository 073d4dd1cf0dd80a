package audit

import (
	"bytes"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit"

	"kplane.dev/kplane/planes"
)

// CursorAnnotation on a served event is its position in its plane's
// trail: 1 for the plane's first event, then one more per event. A reader
// resumes after it with since=<cursor>.
const CursorAnnotation = "audit.kplane.dev/cursor"

// DefaultBufferEvents is how many events a plane's trail keeps in memory.
const DefaultBufferEvents = 1000

// DefaultMaxEventBytes bounds one recorded event, as upstream's log
// backend does by default: a larger one loses its request and response
// bodies and says so (TruncatedAnnotation). With it a full ring of a plane
// holds at most BufferEvents times this, whatever its level.
const DefaultMaxEventBytes = 100 << 10

// TruncatedAnnotation marks an event recorded without its bodies, with the
// key and value upstream's truncating backend uses.
const TruncatedAnnotation = "audit.k8s.io/truncated"

// Planes tells the audit which planes exist and how each is audited.
type Planes interface {
	// Lookup returns the plane's uid and level; exists is false for a
	// plane that does not exist (its events are dropped).
	Lookup(plane string) (uid types.UID, level Level, exists bool)
}

// Config configures the trails.
type Config struct {
	// BufferEvents is how many events each plane keeps in memory.
	BufferEvents int
	// Dir, if set, holds a JSON-lines log per plane (<Dir>/<plane>/).
	Dir string
	// MaxFileBytes rotates a plane's log once it is larger.
	MaxFileBytes int64
	// MaxOpenFiles bounds the logs kept open at once.
	MaxOpenFiles int
	// MaxEventBytes bounds one event (DefaultMaxEventBytes if 0).
	MaxEventBytes int
	Planes        Planes
}

// Trails is the server's audit backend: every plane's trail.
type Trails struct {
	config  Config
	disk    *disk
	encoder runtime.Encoder
	// buffers are encoding buffers, reused across requests.
	buffers sync.Pool

	mu     sync.RWMutex
	trails map[string]*trail
}

var _ audit.Backend = (*Trails)(nil)

// NewTrails returns the trails of config.
func NewTrails(config Config) (*Trails, error) {
	if config.BufferEvents <= 0 {
		return nil, fmt.Errorf("audit buffer of %d events: want at least 1", config.BufferEvents)
	}
	if config.MaxEventBytes <= 0 {
		config.MaxEventBytes = DefaultMaxEventBytes
	}
	t := &Trails{
		config:  config,
		encoder: audit.Codecs.LegacyCodec(auditv1.SchemeGroupVersion),
		trails:  map[string]*trail{},
	}
	t.buffers.New = func() any { return new(bytes.Buffer) }
	if config.Dir != "" {
		d, err := newDisk(config.Dir, config.MaxFileBytes, config.MaxOpenFiles)
		if err != nil {
			return nil, err
		}
		t.disk = d
	}
	return t, nil
}

// ProcessEvents implements audit.Sink. It runs on the request's goroutine
// with the event locked by upstream: the event is encoded at once.
func (t *Trails) ProcessEvents(events ...*auditinternal.Event) bool {
	for _, ev := range events {
		plane := ev.Annotations[planes.Annotation]
		if plane == "" {
			continue
		}
		uid, _, exists := t.config.Planes.Lookup(plane)
		if !exists {
			continue
		}
		if err := t.trail(plane, uid).record(ev, t); err != nil {
			utilruntime.HandleError(fmt.Errorf("audit trail of plane %s: %w", plane, err))
		}
	}
	return true
}

// Run implements audit.Backend: nothing runs in the background.
func (t *Trails) Run(<-chan struct{}) error { return nil }

// Shutdown implements audit.Backend: the open logs are closed.
func (t *Trails) Shutdown() {
	if t.disk != nil {
		t.disk.closeAll()
	}
}

// String implements audit.Backend.
func (t *Trails) String() string { return "kplane-planes" }

// ForgetPlane drops a deleted plane's trail, in memory and on disk, and
// ends its readers.
func (t *Trails) ForgetPlane(plane string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgetLocked(plane)
}

func (t *Trails) forgetLocked(plane string) {
	if tr := t.trails[plane]; tr != nil {
		tr.close()
		delete(t.trails, plane)
	}
	if t.disk != nil {
		if err := t.disk.remove(plane); err != nil {
			utilruntime.HandleError(fmt.Errorf("removing the audit log of plane %s: %w", plane, err))
		}
	}
}

// trail returns the trail of the plane with that uid; a plane deleted and
// created again (another uid) starts a new one.
func (t *Trails) trail(plane string, uid types.UID) *trail {
	t.mu.RLock()
	tr := t.trails[plane]
	t.mu.RUnlock()
	if tr != nil && tr.uid == uid {
		return tr
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr = t.trails[plane]; tr != nil && tr.uid == uid {
		return tr
	}
	if tr != nil {
		t.forgetLocked(plane)
	}
	tr = &trail{plane: plane, uid: uid}
	t.trails[plane] = tr
	return tr
}

// Sweep removes the logs of planes that no longer exist (deleted while
// the server was down). It runs once the planes are known.
func (t *Trails) Sweep() {
	if t.disk == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for plane, uid := range t.disk.planes() {
		known, _, exists := t.config.Planes.Lookup(plane)
		if exists && known == uid {
			continue
		}
		// A trail of the plane as it is now was made before the sweep
		// began: it replaces the stale log itself when it reads it, and
		// forgetting it here would lose what it is recording.
		if tr := t.trails[plane]; exists && tr != nil && tr.uid == known {
			continue
		}
		t.forgetLocked(plane)
	}
}

// encode is the event as served: audit.k8s.io/v1, one line, with its
// cursor. The event is upstream's, still in use: a shallow copy gets the
// cursor annotation. An event over MaxEventBytes is encoded again without
// its bodies; measured here on the line the trail keeps anyway, not by
// wrapping the trails in upstream's truncating backend, which encodes
// every event once more only to learn its size.
func (t *Trails) encode(ev *auditinternal.Event, cursor uint64) ([]byte, error) {
	c := *ev
	c.Annotations = make(map[string]string, len(ev.Annotations)+2)
	maps.Copy(c.Annotations, ev.Annotations)
	c.Annotations[CursorAnnotation] = strconv.FormatUint(cursor, 10)
	buf := t.buffers.Get().(*bytes.Buffer)
	defer t.buffers.Put(buf)
	buf.Reset()
	if err := t.encoder.Encode(&c, buf); err != nil {
		return nil, err
	}
	if buf.Len() > t.config.MaxEventBytes && (c.RequestObject != nil || c.ResponseObject != nil) {
		c.RequestObject, c.ResponseObject = nil, nil
		c.Annotations[TruncatedAnnotation] = "true"
		buf.Reset()
		if err := t.encoder.Encode(&c, buf); err != nil {
			return nil, err
		}
	}
	// A copy of the line's length: the ring keeps it for long, and a
	// buffer's spare capacity would almost double what a full ring holds.
	return bytes.Clone(buf.Bytes()), nil
}

// entry is one recorded event.
type entry struct {
	cursor uint64
	at     time.Time
	line   []byte
}
