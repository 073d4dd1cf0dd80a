package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// StreamContentType is the media type of a delta stream: one JSON Event
// per line.
const StreamContentType = "application/x-ndjson"

// bookmarkInterval is how often a stream says how far it has got, when
// that changed.
const bookmarkInterval = time.Second

// writeChunk is how much a stream buffers before writing.
const writeChunk = 64 << 10

// writeGrace is how long after its end a stream's last write may take:
// past it, a client that stopped reading is cut off.
const writeGrace = 10 * time.Second

// serveStream joins the taps of every target, from the requested
// resourceVersion or, without one, after writing the current state as
// ADDED events, and writes what the taps hand it until the stream times
// out, the client goes, the server shuts down or the stream loses its
// place. A stream holds no watch of its own: it costs a queue and this
// goroutine.
func (s *Server) serveStream(w http.ResponseWriter, req *http.Request, plane string, targets []*target, opts Options) {
	ctx, cancel := context.WithTimeout(req.Context(), s.config.Streams.timeout(opts.Timeout))
	defer cancel()
	// A stream that silently lacked a resource would let a client's copy
	// drift: every resource's cache must be there, built if need be.
	s.warm(ctx, plane, targets)
	for _, t := range targets {
		if !synced(t.store) {
			err := apierrors.NewServiceUnavailable(fmt.Sprintf("the cache of %s is not synced yet; retry", t.name()))
			s.writeError(w, req, err)
			return
		}
	}

	sub := newSubscriber(plane, opts.Namespace, s.taps.settings.backlog)
	defer sub.leave()
	st := newStreamState(targets, opts)
	var initial []listed
	var err error
	if opts.ResourceVersion == 0 {
		initial, err = s.joinCurrent(ctx, sub, st, targets, opts)
	} else {
		err = s.joinFrom(sub, targets, opts.ResourceVersion)
	}
	if err != nil {
		s.writeError(w, req, streamError(plane, err))
		return
	}

	out := http.NewResponseController(w)
	if deadline, ok := ctx.Deadline(); ok {
		_ = out.SetWriteDeadline(deadline.Add(writeGrace))
	}
	w.Header().Set("Content-Type", StreamContentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if err := s.writeInitial(w, st, initial); err != nil {
		return
	}
	// The state (or, from a resourceVersion, the headers) goes out now, not
	// with the first change.
	_ = out.Flush()
	s.pump(ctx, w, out, sub, st, plane)
}

// joinCurrent reads the state of every target from its cache and joins
// its tap right after that state, so that the stream's first events for
// each resource are the changes its list does not hold.
func (s *Server) joinCurrent(ctx context.Context, sub *subscriber, st *streamState, targets []*target, opts Options) ([]listed, error) {
	lists := make([]listed, len(targets))
	for i, t := range targets {
		for attempt := 0; ; attempt++ {
			l, err := read(ctx, t, opts)
			if err != nil {
				return nil, err
			}
			if !l.synced {
				return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("the cache of %s is not synced yet; retry", t.name()))
			}
			j := &subscription{sub: sub, target: i, from: l.rv}
			err = s.taps.subscribe(t.store, j)
			var old *tooOldError
			if errors.As(err, &old) && attempt < 2 {
				// A tap started meanwhile from a later revision: its
				// history begins after this list; read again.
				continue
			}
			if err != nil {
				return nil, err
			}
			sub.joined = append(sub.joined, j)
			lists[i] = l
			st.delivered[i] = l.rv
			break
		}
	}
	return lists, nil
}

// joinFrom joins the tap of every target from rv: the taps queue what
// their history holds after rv, or refuse rv with 410 when it does not
// reach back that far.
func (s *Server) joinFrom(sub *subscriber, targets []*target, rv uint64) error {
	for i, t := range targets {
		j := &subscription{sub: sub, target: i, from: rv}
		if err := s.taps.subscribe(t.store, j); err != nil {
			return err
		}
		sub.joined = append(sub.joined, j)
	}
	return nil
}

// streamError is the answer for an error of joining the taps.
func streamError(plane string, err error) error {
	var old *tooOldError
	if errors.As(err, &old) {
		return old.status(plane)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if se, ok := status.(*apierrors.StatusError); ok {
			return se
		}
		return &apierrors.StatusError{ErrStatus: status.Status()}
	}
	return apierrors.NewInternalError(err)
}

// writeInitial writes the state read by joinCurrent as ADDED events; an
// object's encoding is the one snapshots keep, when they have it.
func (s *Server) writeInitial(w io.Writer, st *streamState, lists []listed) error {
	now := time.Now()
	buf := getBuffer()
	defer putBuffer(buf)
	for i, l := range lists {
		for _, obj := range l.items {
			st.hold(i, obj)
			err := writeLine(buf, Added, l.target, func(b *bytes.Buffer) error {
				return s.encodings.encode(b, l.enc, obj, now)
			})
			if err != nil {
				return err
			}
			if buf.Len() >= writeChunk {
				if _, err := w.Write(buf.Bytes()); err != nil {
					return err
				}
				buf.Reset()
			}
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// pump writes what the taps hand the stream, and a BOOKMARK each second
// when every resource has got further.
func (s *Server) pump(ctx context.Context, w io.Writer, out *http.ResponseController, sub *subscriber, st *streamState, plane string) {
	var shutdown <-chan struct{}
	if signal := request.ServerShutdownSignalFrom(ctx); signal != nil {
		shutdown = signal.ShuttingDown()
	}
	ticker := time.NewTicker(bookmarkInterval)
	defer ticker.Stop()
	positions := make([]uint64, len(st.targets))
	var spare []queued
	for {
		var ok bool
		select {
		case <-ctx.Done():
			return
		case <-shutdown:
			return
		case <-sub.notify:
			if spare, ok = drain(w, sub, st, plane, spare); !ok {
				return
			}
		case <-ticker.C:
			// Where the taps are, read before what they queued: every
			// event up to there is then written below.
			for _, j := range sub.joined {
				positions[j.target] = j.tap.at.Load()
			}
			if spare, ok = drain(w, sub, st, plane, spare); !ok {
				return
			}
			st.reached(positions)
			if rv, advanced := st.advanced(); advanced {
				line, _ := json.Marshal(bookmark(rv))
				if _, err := w.Write(append(line, '\n')); err != nil {
					return
				}
			}
		}
		_ = out.Flush()
	}
}

// spareQueue is the largest queue a stream keeps for reuse between
// batches; a bigger one (a catch-up) is left to the garbage collector.
const spareQueue = 256

// drain writes what is queued for the stream and returns the queue to
// reuse; false: the stream is over. Its buffer is borrowed for the batch:
// an idle stream holds none.
func drain(w io.Writer, sub *subscriber, st *streamState, plane string, spare []queued) ([]queued, bool) {
	q, lost := sub.take(spare)
	if len(q) == 0 && lost == nil {
		return q, true
	}
	ok := writeQueued(w, q, lost, st, plane)
	clear(q)
	if cap(q) > spareQueue {
		q = nil
	}
	return q, ok
}

func writeQueued(w io.Writer, q []queued, lost *lostPlace, st *streamState, plane string) bool {
	buf := getBuffer()
	defer putBuffer(buf)
	for _, item := range q {
		if err := st.apply(buf, item); err != nil {
			writeErrorEvent(buf, apierrors.NewInternalError(err))
			_, _ = w.Write(buf.Bytes())
			return false
		}
		if buf.Len() >= writeChunk {
			if _, err := w.Write(buf.Bytes()); err != nil {
				return false
			}
			buf.Reset()
		}
	}
	if lost != nil {
		writeErrorEvent(buf, apierrors.NewResourceExpired(fmt.Sprintf(
			"the delta stream of plane %q lost its place in %s (%s); take a new snapshot and watch from its resourceVersion",
			plane, st.targets[lost.target].name(), lost.reason)))
	}
	if buf.Len() > 0 {
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
	}
	return lost == nil
}

// streamState tracks how far each resource of a stream has got and, under
// a label selector, which objects the client holds.
type streamState struct {
	targets []*target
	// delivered[i] is a revision up to which every event of target i has
	// been written.
	delivered []uint64
	// bookmarked is the last revision written in a BOOKMARK.
	bookmarked uint64

	// selector is the stream's label selector (nil: every object).
	selector labels.Selector
	// held[i] says, by namespace/name, whether the client holds an object
	// of target i; an object not in it is not held when known is true, and
	// unknown otherwise (a stream from a resourceVersion cannot tell what
	// matched the selector back then).
	held  []map[string]bool
	known bool
}

func newStreamState(targets []*target, opts Options) *streamState {
	st := &streamState{targets: targets, delivered: make([]uint64, len(targets)), bookmarked: opts.ResourceVersion}
	for i := range st.delivered {
		st.delivered[i] = opts.ResourceVersion
	}
	if opts.LabelSelector != nil && !opts.LabelSelector.Empty() {
		st.selector = opts.LabelSelector
		st.held = make([]map[string]bool, len(targets))
		for i := range st.held {
			st.held[i] = map[string]bool{}
		}
		st.known = opts.ResourceVersion == 0
	}
	return st
}

// hold records an object of the initial state.
func (st *streamState) hold(target int, obj runtime.Object) {
	if st.selector == nil {
		return
	}
	if accessor, err := meta.Accessor(obj); err == nil {
		st.held[target][accessor.GetNamespace()+"/"+accessor.GetName()] = true
	}
}

// reached records the taps' positions: the stream has been handed every
// event up to them.
func (st *streamState) reached(positions []uint64) {
	for i, rv := range positions {
		st.delivered[i] = max(st.delivered[i], rv)
	}
}

// advanced returns the revision every resource has been delivered up to,
// if it is newer than the last bookmark.
func (st *streamState) advanced() (uint64, bool) {
	var low uint64 = math.MaxUint64
	for _, d := range st.delivered {
		low = min(low, d)
	}
	if low == 0 || low == math.MaxUint64 || low <= st.bookmarked {
		return 0, false
	}
	st.bookmarked = low
	return low, true
}

// apply writes the line for one queued event, if the client is to see it.
func (st *streamState) apply(line *bytes.Buffer, q queued) error {
	t := st.targets[q.target]
	st.delivered[q.target] = max(st.delivered[q.target], q.event.rv)
	typ, ok := st.visible(q.target, q.event)
	if !ok {
		return nil
	}
	return writeEvent(line, typ, t, q.event.obj, q.event.memo)
}

// visible is the type of the event the client sees (none: false). Under
// a label selector an object that stops matching is deleted for the client
// and one that starts matching is added, as in a Kubernetes watch.
func (st *streamState) visible(target int, e tapEvent) (string, bool) {
	if st.selector == nil {
		return eventType(e.typ)
	}
	accessor, err := meta.Accessor(e.obj)
	if err != nil {
		return "", false
	}
	key := accessor.GetNamespace() + "/" + accessor.GetName()
	held, seen := st.held[target][key]
	if !seen && st.known {
		held, seen = false, true
	}
	matches := st.selector.Matches(labels.Set(accessor.GetLabels()))
	switch {
	case e.typ == watch.Deleted:
		delete(st.held[target], key)
		// An object that does not match when deleted was either never
		// held, or deleted for the client when it stopped matching.
		return Deleted, matches || held
	case matches:
		st.held[target][key] = true
		if seen && !held {
			return Added, true
		}
		if seen {
			return Modified, true
		}
		return eventType(e.typ)
	default:
		st.held[target][key] = false
		// A change that leaves an object unmatched may end its match: tell
		// the client, unless it is known not to hold the object.
		return Deleted, e.typ == watch.Modified && (held || !seen)
	}
}

func eventType(t watch.EventType) (string, bool) {
	switch t {
	case watch.Added:
		return Added, true
	case watch.Modified:
		return Modified, true
	case watch.Deleted:
		return Deleted, true
	}
	return "", false
}

// writeEvent writes one event line. Events handed out by a tap share one
// encoding of their object (the cache's serialization cache, or memo for
// an event from the cache's history) between every stream they reach, so
// concurrent streams of a plane encode each change once.
func writeEvent(line *bytes.Buffer, typ string, t *target, obj runtime.Object, memo *encodingMemo) error {
	id := runtime.Identifier("kplane-snapshot:" + t.gvr.GroupVersion().String())
	return writeLine(line, typ, t, func(b *bytes.Buffer) error {
		cacheable, ok := obj.(runtime.CacheableObject)
		if !ok && memo != nil {
			return memo.encode(id, b, func(b *bytes.Buffer) error { return t.enc.encode(b, obj) })
		}
		if !ok {
			return t.enc.encode(b, obj)
		}
		return cacheable.CacheEncode(id, func(o runtime.Object, w io.Writer) error {
			enc := &bytes.Buffer{}
			if err := t.enc.encode(enc, o); err != nil {
				return err
			}
			_, err := w.Write(enc.Bytes())
			return err
		}, b)
	})
}

// writeLine writes an event line around the object object writes.
func writeLine(line *bytes.Buffer, typ string, t *target, object func(*bytes.Buffer) error) error {
	start := line.Len()
	line.WriteString(`{"type":"`)
	line.WriteString(typ)
	line.WriteString(`","group":`)
	_ = writeJSON(line, t.gvr.Group)
	line.WriteString(`,"resource":`)
	_ = writeJSON(line, t.gvr.Resource)
	line.WriteString(`,"object":`)
	if err := object(line); err != nil {
		line.Truncate(start)
		return fmt.Errorf("encoding %s: %w", t.name(), err)
	}
	line.WriteString("}\n")
	return nil
}

// bookmark is a BOOKMARK event. Its object, like a Kubernetes watch
// bookmark's, holds only metadata.resourceVersion, so that every line of a
// stream has a type and an object.
func bookmark(rv uint64) Event {
	v := strconv.FormatUint(rv, 10)
	return Event{Type: Bookmark, ResourceVersion: v, Object: json.RawMessage(`{"metadata":{"resourceVersion":"` + v + `"}}`)}
}

func writeErrorEvent(line *bytes.Buffer, err *apierrors.StatusError) {
	status := err.ErrStatus
	status.Kind, status.APIVersion = "Status", "v1"
	line.WriteString(`{"type":"ERROR","object":`)
	_ = writeJSON(line, &status)
	line.WriteString("}\n")
}

func objectVersion(obj runtime.Object) (uint64, bool) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return 0, false
	}
	rv, err := strconv.ParseUint(accessor.GetResourceVersion(), 10, 64)
	return rv, err == nil
}
