package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
)

// StreamContentType is the media type of a delta stream: one JSON Event
// per line.
const StreamContentType = "application/x-ndjson"

// bookmarkInterval is how often a stream says how far it has got, when
// that changed.
const bookmarkInterval = time.Second

// sourced is an event of one target's watch; closed says the watch ended.
type sourced struct {
	target int
	event  watch.Event
	closed bool
}

// serveStream opens one plane-scoped watch per target, all from the
// requested resourceVersion, and writes their events as they come.
func (s *Server) serveStream(w http.ResponseWriter, req *http.Request, plane string, targets []*target, opts Options) {
	ctx, cancel := context.WithCancel(req.Context())
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

	watches, first, err := s.startWatches(ctx, plane, targets, opts)
	defer func() {
		for _, wi := range watches {
			wi.Stop()
		}
	}()
	if err != nil {
		s.writeError(w, req, err)
		return
	}

	if opts.Timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, opts.Timeout)
		defer stop()
	}
	var shutdown <-chan struct{}
	if signal := request.ServerShutdownSignalFrom(ctx); signal != nil {
		shutdown = signal.ShuttingDown()
	}

	events := make(chan sourced, 64)
	for i, wi := range watches {
		go forward(ctx, i, wi, first[i], events)
	}

	w.Header().Set("Content-Type", StreamContentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	out := http.NewResponseController(w)
	_ = out.Flush()

	st := newStreamState(targets, opts.ResourceVersion)
	ticker := time.NewTicker(bookmarkInterval)
	defer ticker.Stop()
	line := &bytes.Buffer{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-shutdown:
			return
		case <-ticker.C:
			if rv, ok := st.advanced(); ok {
				line.Reset()
				_ = writeJSON(line, bookmark(rv))
				line.WriteByte('\n')
				if _, err := w.Write(line.Bytes()); err != nil {
					return
				}
				_ = out.Flush()
			}
		case ev := <-events:
			line.Reset()
			end, err := st.apply(line, ev, plane)
			if err != nil {
				line.Reset()
				writeErrorEvent(line, apierrors.NewInternalError(err))
				end = true
			}
			if line.Len() > 0 {
				if _, err := w.Write(line.Bytes()); err != nil {
					return
				}
			}
			if end {
				_ = out.Flush()
				return
			}
			// Flush once the burst is written, not after every event.
			if len(events) == 0 {
				_ = out.Flush()
			}
		}
	}
}

// startWatches opens the watches. A watch the cache refuses at once (its
// history does not reach back to the resourceVersion) fails the request
// with 410 Gone before anything is streamed. first holds, per watch, an
// event already taken from it while looking for that refusal.
func (s *Server) startWatches(ctx context.Context, plane string, targets []*target, opts Options) ([]watch.Interface, []*watch.Event, error) {
	rv := strconv.FormatUint(opts.ResourceVersion, 10)
	watches := make([]watch.Interface, 0, len(targets))
	first := make([]*watch.Event, len(targets))
	for i, t := range targets {
		key := t.store.ResourcePrefix()
		if opts.Namespace != "" {
			key += "/" + opts.Namespace
		}
		pred := storage.SelectionPredicate{
			Label: opts.LabelSelector, Field: fields.Everything(), GetAttrs: storage.DefaultClusterScopedAttr,
			AllowWatchBookmarks: true,
		}
		wi, err := t.store.Watch(ctx, key, storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: pred})
		if err != nil {
			return watches, nil, fmt.Errorf("watching %s: %w", t.name(), err)
		}
		watches = append(watches, wi)
		select {
		case ev, ok := <-wi.ResultChan():
			switch {
			case !ok:
				return watches, nil, apierrors.NewServiceUnavailable(fmt.Sprintf("the cache of %s is restarting; retry", t.name()))
			case ev.Type == watch.Error:
				return watches, nil, refused(plane, t, opts.ResourceVersion, ev.Object)
			default:
				first[i] = &ev
			}
		default:
		}
	}
	return watches, first, nil
}

// refused turns a cache's refusal to watch into the request's answer.
func refused(plane string, t *target, rv uint64, obj runtime.Object) error {
	status, ok := obj.(*metav1.Status)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("watching %s: %v", t.name(), obj))
	}
	if status.Code == http.StatusGone || status.Reason == metav1.StatusReasonExpired || status.Reason == metav1.StatusReasonGone {
		return apierrors.NewResourceExpired(fmt.Sprintf(
			"resourceVersion %d is too old for the delta stream of plane %q: the cache of %s no longer holds the changes since then (%s); take a new snapshot and watch from its resourceVersion",
			rv, plane, t.name(), status.Message))
	}
	return &apierrors.StatusError{ErrStatus: *status}
}

func forward(ctx context.Context, i int, w watch.Interface, first *watch.Event, out chan<- sourced) {
	if first != nil {
		select {
		case out <- sourced{target: i, event: *first}:
		case <-ctx.Done():
			return
		}
	}
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				select {
				case out <- sourced{target: i, closed: true}:
				case <-ctx.Done():
				}
				return
			}
			select {
			case out <- sourced{target: i, event: ev}:
			case <-ctx.Done():
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// streamState tracks how far each watch of a stream has got.
type streamState struct {
	targets []*target
	// delivered[i] is a revision up to which every event of target i has
	// been written (0: not known yet).
	delivered []uint64
	// bookmarked is the last revision written in a BOOKMARK.
	bookmarked uint64
}

func newStreamState(targets []*target, from uint64) *streamState {
	st := &streamState{targets: targets, delivered: make([]uint64, len(targets)), bookmarked: from}
	for i := range st.delivered {
		st.delivered[i] = from
	}
	return st
}

// advanced returns the revision every watch has been delivered up to, if
// it is newer than the last bookmark.
func (st *streamState) advanced() (uint64, bool) {
	var low uint64 = math.MaxUint64
	for _, d := range st.delivered {
		if d < low {
			low = d
		}
	}
	if low == 0 || low == math.MaxUint64 || low <= st.bookmarked {
		return 0, false
	}
	st.bookmarked = low
	return low, true
}

// apply writes the line for ev (nothing for a watch's own bookmark) and
// reports whether the stream ends with it.
func (st *streamState) apply(line *bytes.Buffer, ev sourced, plane string) (bool, error) {
	t := st.targets[ev.target]
	if ev.closed {
		writeErrorEvent(line, apierrors.NewResourceExpired(fmt.Sprintf(
			"the delta stream of plane %q lost its place in %s (its cache restarted, or the stream was read too slowly); take a new snapshot and watch from its resourceVersion",
			plane, t.name())))
		return true, nil
	}
	var typ string
	switch ev.event.Type {
	case watch.Added:
		typ = Added
	case watch.Modified:
		typ = Modified
	case watch.Deleted:
		typ = Deleted
	case watch.Bookmark:
		if rv, ok := objectVersion(ev.event.Object); ok && rv > st.delivered[ev.target] {
			st.delivered[ev.target] = rv
		}
		return false, nil
	case watch.Error:
		if status, ok := ev.event.Object.(*metav1.Status); ok {
			writeErrorEvent(line, &apierrors.StatusError{ErrStatus: *status})
		} else {
			writeErrorEvent(line, apierrors.NewInternalError(fmt.Errorf("watching %s: %v", t.name(), ev.event.Object)))
		}
		return true, nil
	default:
		return false, nil
	}
	if err := writeEvent(line, typ, t, ev.event.Object); err != nil {
		return false, err
	}
	if rv, ok := objectVersion(ev.event.Object); ok && rv > st.delivered[ev.target] {
		st.delivered[ev.target] = rv
	}
	return false, nil
}

// writeEvent writes one event line. Events handed to every watcher of a
// plane share one encoding of their object (the cache's serialization
// cache), so concurrent streams of a plane encode each change once.
func writeEvent(line *bytes.Buffer, typ string, t *target, obj runtime.Object) error {
	line.WriteString(`{"type":"`)
	line.WriteString(typ)
	line.WriteString(`","group":`)
	if err := writeJSON(line, t.gvr.Group); err != nil {
		return err
	}
	line.WriteString(`,"resource":`)
	if err := writeJSON(line, t.gvr.Resource); err != nil {
		return err
	}
	line.WriteString(`,"object":`)
	if cacheable, ok := obj.(runtime.CacheableObject); ok {
		id := runtime.Identifier("kplane-snapshot:" + t.gvr.GroupVersion().String())
		err := cacheable.CacheEncode(id, func(o runtime.Object, w io.Writer) error {
			b := &bytes.Buffer{}
			if err := t.enc.encode(b, o); err != nil {
				return err
			}
			_, err := w.Write(b.Bytes())
			return err
		}, line)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", t.name(), err)
		}
	} else if err := t.enc.encode(line, obj); err != nil {
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
