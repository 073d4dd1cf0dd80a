package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
)

// source is what a tap follows: the storage of one resource, watched
// across every plane (*planes/storage.Store).
type source interface {
	Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error)
	// WatchDatastore is Watch straight from the datastore, for a revision
	// the cache cannot serve.
	WatchDatastore(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error)
	// LayerEvent tells an event of a plane's own records as the plane's
	// clients see it (a plane made from a template stores only changes).
	LayerEvent(ctx context.Context, plane string, ev watch.Event) (watch.Event, bool)
	Resource() schema.GroupResource
	ResourcePrefix() string
	Gone() <-chan struct{}
}

// tapSettings size the taps.
type tapSettings struct {
	// history is how many of a resource's latest events (all planes
	// together) a tap keeps for streams that start behind it.
	history int
	// linger is how long a tap without streams keeps following, for
	// streams that reconnect.
	linger time.Duration
	// backlog is how many events a stream may leave unread before it
	// loses its place.
	backlog int
}

func defaultTapSettings() tapSettings {
	return tapSettings{history: 1024, linger: time.Minute, backlog: 4096}
}

// taps are the server's followers of resources with delta streams: one
// cross-plane cache watch per resource, whatever the number of streams
// and planes, dispatching each event to the streams of its plane. A
// resource nobody streams has no tap; a plane without streams has nothing.
type taps struct {
	settings tapSettings
	// handedOut remembers the resourceVersions recent snapshots handed
	// out, so that a tap starts early enough for the streams that follow
	// them.
	handedOut *recentVersions

	mu   sync.Mutex
	open map[source]*tap
}

func newTaps(settings tapSettings) *taps {
	return &taps{settings: settings, handedOut: newRecentVersions(time.Minute), open: map[source]*tap{}}
}

// errTapStopped: the tap stopped while being joined; take a new one.
var errTapStopped = errors.New("tap stopped")

// subscribe joins s to the tap of src, starting one if none runs.
func (ts *taps) subscribe(src source, s *subscription) error {
	for attempt := 0; ; attempt++ {
		tp := ts.tapOf(src)
		err := tp.add(s, ts.startCandidates(s.from))
		if !errors.Is(err, errTapStopped) || attempt == 2 {
			return err
		}
	}
}

func (ts *taps) tapOf(src source) *tap {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	tp, ok := ts.open[src]
	if !ok {
		tp = &tap{src: src, owner: ts, ring: history{capacity: ts.settings.history}, subs: map[string]map[*subscription]struct{}{}}
		ts.open[src] = tp
	}
	return tp
}

func (ts *taps) forget(tp *tap) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.open[tp.src] == tp {
		delete(ts.open, tp.src)
	}
}

// startCandidates are the revisions a new tap tries to start from, oldest
// first: the oldest one a recent snapshot handed out, then from itself.
func (ts *taps) startCandidates(from uint64) []uint64 {
	if oldest := ts.handedOut.oldest(time.Now()); oldest > 0 && oldest < from {
		return []uint64{oldest, from}
	}
	return []uint64{from}
}

// handedOutRecently reports whether rv is no older than the revisions
// recent snapshots handed out.
func (ts *taps) handedOutRecently(rv uint64) bool {
	oldest := ts.handedOut.oldest(time.Now())
	return oldest > 0 && rv >= oldest
}

// startedAt is the revision the running tap of src started from; 0 when
// none runs.
func (ts *taps) startedAt(src source) uint64 {
	ts.mu.Lock()
	tp := ts.open[src]
	ts.mu.Unlock()
	if tp == nil {
		return 0
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.stopped {
		return 0
	}
	return tp.startedAt
}

// running is the number of taps following a resource.
func (ts *taps) running() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.open)
}

// tap follows one resource across every plane. It keeps the last events
// (history) so that a stream starting from a recent revision catches up
// from memory, and hands each new event to the streams of the event's
// plane, in revision order, without ever waiting for them.
type tap struct {
	src   source
	owner *taps

	// at is the revision up to which every event has been handed out.
	at atomic.Uint64

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	ring    history
	// startedAt is the revision the tap started from: no stream can
	// start before it.
	startedAt uint64
	// subs are the streams by plane; a plane without streams has no entry.
	subs  map[string]map[*subscription]struct{}
	count int
	idle  *time.Timer
}

// subscription is one stream's place in one tap.
type subscription struct {
	sub    *subscriber
	tap    *tap
	target int
	// from: events up to this revision are not the stream's.
	from uint64
}

// add joins s, starting the tap from the first candidate revision its
// cache accepts if it is not running yet, and queues what the history
// holds for s. A revision the history no longer reaches is refused with
// 410 Gone.
func (tp *tap) add(s *subscription, candidates []uint64) error {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.stopped {
		return errTapStopped
	}
	if !tp.started {
		if err := tp.start(candidates); err != nil {
			tp.stopLocked("")
			return err
		}
	}
	if s.from < tp.ring.since {
		return &tooOldError{resource: tp.src.Resource(), rv: s.from,
			detail: fmt.Sprintf("the server holds its changes from revision %d on", tp.ring.since)}
	}
	s.tap = tp
	tp.ring.after(s.from, s.sub.plane, func(e tapEvent) {
		if s.sub.wants(e) {
			s.sub.offer(s.target, e, false)
		}
	})
	plane := tp.subs[s.sub.plane]
	if plane == nil {
		plane = map[*subscription]struct{}{}
		tp.subs[s.sub.plane] = plane
	}
	plane[s] = struct{}{}
	tp.count++
	if tp.idle != nil {
		tp.idle.Stop()
		tp.idle = nil
	}
	return nil
}

// remove takes s out; the last stream out leaves the tap lingering.
func (tp *tap) remove(s *subscription) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.removeLocked(s)
}

func (tp *tap) removeLocked(s *subscription) {
	plane := tp.subs[s.sub.plane]
	if _, ok := plane[s]; !ok {
		return
	}
	delete(plane, s)
	if len(plane) == 0 {
		delete(tp.subs, s.sub.plane)
	}
	tp.count--
	if tp.count == 0 && !tp.stopped {
		tp.idle = time.AfterFunc(tp.owner.settings.linger, tp.stopIfIdle)
	}
}

func (tp *tap) stopIfIdle() {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.count == 0 && !tp.stopped {
		tp.stopLocked("")
	}
}

// stopLocked ends the tap; the streams still in it lose their place for
// reason.
func (tp *tap) stopLocked(reason string) {
	tp.stopped = true
	if tp.cancel != nil {
		tp.cancel()
	}
	if tp.idle != nil {
		tp.idle.Stop()
		tp.idle = nil
	}
	for _, plane := range tp.subs {
		for s := range plane {
			s.sub.lose(s.target, reason)
		}
	}
	tp.subs, tp.count = nil, 0
	tp.ring = history{}
	tp.owner.forget(tp)
}

// start opens the cross-plane watch from the first candidate revision it
// can serve, oldest first. When the cache refuses a candidate that a
// recent snapshot handed out, the watch replays it from the datastore
// before a later candidate is tried: the cache started after that
// snapshot read the other caches (a server start, a new custom resource's
// storage), or its window no longer reaches back that far, while the
// datastore still holds the changes since. Starting from the later
// candidate instead would refuse with 410 every stream that follows the
// snapshot. Older revisions stay refused: a stream cannot make the server
// replay more than the last snapshots' window.
func (tp *tap) start(candidates []uint64) error {
	var err error
	for _, rv := range candidates {
		if err = tp.startFrom(rv, tp.src.Watch); err == nil {
			return nil
		}
		var old *tooOldError
		if errors.As(err, &old) && tp.owner.handedOutRecently(rv) {
			if replayErr := tp.startFrom(rv, tp.replay); replayErr == nil {
				return nil
			}
		}
	}
	return err
}

// startFrom starts the tap on the watch open makes from rv.
func (tp *tap) startFrom(rv uint64, open watchFunc) error {
	ctx, cancel := context.WithCancel(planes.WithAllPlanes(context.Background()))
	w, first, err := tp.openFrom(ctx, rv, open)
	if err != nil {
		cancel()
		return err
	}
	tp.started, tp.cancel = true, cancel
	tp.ring.since, tp.startedAt = rv, rv
	tp.at.Store(rv)
	go tp.run(ctx, w, first)
	return nil
}

// replay watches the datastore, with its progress notifications as
// bookmarks (the cache makes its own).
func (tp *tap) replay(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	opts.ProgressNotify = true
	return tp.src.WatchDatastore(ctx, key, opts)
}

// watchFunc opens a watch of a source.
type watchFunc func(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error)

// watchFrom opens the cache's watch from rv.
func (tp *tap) watchFrom(ctx context.Context, rv uint64) (watch.Interface, *watch.Event, error) {
	return tp.openFrom(ctx, rv, tp.src.Watch)
}

// openFrom opens the watch. A watch refused at once (its history does not
// reach back to rv) is an error; first is an event already taken from the
// watch while looking for that refusal.
func (tp *tap) openFrom(ctx context.Context, rv uint64, open watchFunc) (watch.Interface, *watch.Event, error) {
	// Bookmarks move a quiet resource's position on, and with it the
	// BOOKMARKs of its streams.
	everything := storage.Everything
	everything.AllowWatchBookmarks = true
	w, err := open(ctx, tp.src.ResourcePrefix(), storage.ListOptions{
		ResourceVersion: strconv.FormatUint(rv, 10), Recursive: true, Predicate: everything,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("watching %s: %w", tp.src.Resource(), err)
	}
	select {
	case ev, ok := <-w.ResultChan():
		switch {
		case !ok:
			w.Stop()
			return nil, nil, apierrors.NewServiceUnavailable(fmt.Sprintf("the cache of %s is restarting; retry", tp.src.Resource()))
		case ev.Type == watch.Error:
			w.Stop()
			return nil, nil, refusal(tp.src.Resource(), rv, ev.Object)
		default:
			return w, &ev, nil
		}
	default:
		return w, nil, nil
	}
}

// refusal turns a cache's refusal to watch into an error.
func refusal(resource schema.GroupResource, rv uint64, obj runtime.Object) error {
	status, ok := obj.(*metav1.Status)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("watching %s: %v", resource, obj))
	}
	if status.Code == http.StatusGone || status.Reason == metav1.StatusReasonExpired || status.Reason == metav1.StatusReasonGone {
		return &tooOldError{resource: resource, rv: rv, detail: status.Message}
	}
	return &apierrors.StatusError{ErrStatus: *status}
}

// tooOldError: a stream's revision is older than the server can serve.
// Its plane is filled in when it becomes the request's answer.
type tooOldError struct {
	resource schema.GroupResource
	rv       uint64
	detail   string
}

func (e *tooOldError) Error() string {
	return fmt.Sprintf("resourceVersion %d is too old for %s: %s", e.rv, e.resource, e.detail)
}

func (e *tooOldError) status(plane string) *apierrors.StatusError {
	return apierrors.NewResourceExpired(fmt.Sprintf(
		"resourceVersion %d is too old for the delta stream of plane %q: the server no longer holds the changes of %s since then (%s); take a new snapshot and watch from its resourceVersion",
		e.rv, plane, e.resource, e.detail))
}

// run hands out the watch's events until the tap stops. A watch that ends
// is opened again from where it was; if the cache cannot serve that, the
// streams lose their place in this resource.
func (tp *tap) run(ctx context.Context, w watch.Interface, first *watch.Event) {
	if first != nil && !tp.handle(*first) {
		w = tp.reopen(ctx, w)
	}
	for w != nil {
		select {
		case <-ctx.Done():
			w.Stop()
			return
		case <-tp.src.Gone():
			w.Stop()
			tp.mu.Lock()
			if !tp.stopped {
				tp.stopLocked(fmt.Sprintf("the storage of %s was removed", tp.src.Resource()))
			}
			tp.mu.Unlock()
			return
		case ev, ok := <-w.ResultChan():
			if !ok || !tp.handle(ev) {
				w = tp.reopen(ctx, w)
			}
		}
	}
}

// reopen replaces a watch that ended; nil: the tap stopped.
func (tp *tap) reopen(ctx context.Context, old watch.Interface) watch.Interface {
	old.Stop()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.stopped || ctx.Err() != nil {
		return nil
	}
	at := tp.at.Load()
	w, first, err := tp.watchFrom(ctx, at)
	if err == nil && (first == nil || tp.handleLocked(*first)) {
		return w
	}
	if w != nil {
		w.Stop()
	}
	tp.stopLocked(fmt.Sprintf("the server's watch of %s restarted and cannot resume from revision %d", tp.src.Resource(), at))
	return nil
}

// handle files one event; false: the watch failed.
func (tp *tap) handle(ev watch.Event) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.stopped {
		return true
	}
	return tp.handleLocked(ev)
}

func (tp *tap) handleLocked(ev watch.Event) bool {
	if ev.Type == watch.Error {
		return false
	}
	rv, ok := objectVersion(ev.Object)
	if !ok || rv <= tp.at.Load() {
		return true
	}
	if ev.Type == watch.Bookmark {
		tp.at.Store(rv)
		return true
	}
	plane := planes.OfObject(ev.Object)
	ev, keep := tp.src.LayerEvent(context.Background(), plane, ev)
	if !keep {
		tp.at.Store(rv)
		return true
	}
	e := tapEvent{rv: rv, plane: plane, typ: ev.Type, obj: ev.Object}
	if _, ok := ev.Object.(runtime.CacheableObject); !ok {
		// An event from the cache's history carries a copy of the object
		// without the cache's serialization cache: the streams it reaches
		// share this one.
		e.memo = &encodingMemo{}
	}
	tp.ring.add(e)
	for s := range tp.subs[e.plane] {
		if e.rv <= s.from || !s.sub.wants(e) {
			continue
		}
		if !s.sub.offer(s.target, e, true) {
			tp.removeLocked(s)
		}
	}
	tp.at.Store(rv)
	return true
}

// tapEvent is one change of a resource in one plane.
type tapEvent struct {
	rv    uint64
	plane string
	typ   watch.EventType
	obj   runtime.Object
	// memo keeps the encoding of an object that has no serialization
	// cache of its own (nil: obj is a runtime.CacheableObject).
	memo *encodingMemo
}

// encodingMemo is one object's encoding, shared by the streams that write
// it.
type encodingMemo struct {
	mu   sync.Mutex
	id   runtime.Identifier
	data []byte
}

// encode appends the encoding of id to w, encoding it only the first
// time. An object is written in one version by all streams of its plane;
// another id is encoded without being kept.
func (m *encodingMemo) encode(id runtime.Identifier, w *bytes.Buffer, encode func(*bytes.Buffer) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data != nil {
		if m.id == id {
			w.Write(m.data)
			return nil
		}
		return encode(w)
	}
	start := w.Len()
	if err := encode(w); err != nil {
		return err
	}
	m.id, m.data = id, bytes.Clone(w.Bytes()[start:])
	return nil
}

// history is a ring of a resource's latest events, every plane's.
type history struct {
	capacity int
	events   []tapEvent
	start    int
	// since is the oldest revision a stream can start from: every event
	// after it is held.
	since uint64
}

func (h *history) add(e tapEvent) {
	if h.capacity <= 0 {
		h.since = max(h.since, e.rv)
		return
	}
	if len(h.events) < h.capacity {
		h.events = append(h.events, e)
		return
	}
	h.since = max(h.since, h.events[h.start].rv)
	h.events[h.start] = e
	h.start = (h.start + 1) % h.capacity
}

// after calls f with plane's events after rv, oldest first.
func (h *history) after(rv uint64, plane string, f func(tapEvent)) {
	n := len(h.events)
	for i := 0; i < n; i++ {
		if e := h.events[(h.start+i)%n]; e.rv > rv && e.plane == plane {
			f(e)
		}
	}
}

// recentVersions is the oldest revision handed out over the last one or
// two windows; it holds two numbers, whatever the traffic.
type recentVersions struct {
	window time.Duration

	mu      sync.Mutex
	began   time.Time
	current uint64
	prior   uint64
}

func newRecentVersions(window time.Duration) *recentVersions {
	return &recentVersions{window: window, began: time.Now()}
}

func (r *recentVersions) record(rv uint64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
	if r.current == 0 || rv < r.current {
		r.current = rv
	}
}

// oldest is 0 when nothing was handed out lately.
func (r *recentVersions) oldest(now time.Time) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
	switch {
	case r.prior == 0:
		return r.current
	case r.current == 0:
		return r.prior
	default:
		return min(r.prior, r.current)
	}
}

func (r *recentVersions) rotate(now time.Time) {
	elapsed := now.Sub(r.began)
	if elapsed < r.window {
		return
	}
	r.prior = r.current
	if elapsed >= 2*r.window {
		r.prior = 0
	}
	r.current, r.began = 0, now
}
