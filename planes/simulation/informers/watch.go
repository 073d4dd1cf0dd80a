package informers

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	planestorage "kplane.dev/kplane/planes/storage"
)

// expectation is what an informer is to hold of a plane once it has
// taken the events of a look at what the plane inherits: key -> present.
type expectation map[string]bool

// inherit makes the source's watch look again at what plane inherits; the
// channel receives what the informer is to hold once the events are sent.
func (s *source) inherit(plane string) <-chan expectation {
	done := make(chan expectation, 1)
	s.mu.Lock()
	if s.pending == nil {
		s.pending = map[string][]chan<- expectation{}
	}
	s.pending[plane] = append(s.pending[plane], done)
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
	return done
}

// takePending returns the planes to look at again, with who waits for
// each, and forgets them.
func (s *source) takePending() map[string][]chan<- expectation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.pending
	s.pending = nil
	return out
}

func (s *source) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		return nil, fmt.Errorf("a watch of %s of every plane cannot stream its initial list", s.store.Resource())
	}
	inner, err := s.store.Watch(s.scope(ctx), s.store.ResourcePrefix(), storage.ListOptions{
		ResourceVersion: opts.ResourceVersion, Recursive: true, Predicate: storage.Everything,
		ProgressNotify: opts.AllowWatchBookmarks,
	})
	if err != nil {
		return nil, err
	}
	w := &planesWatch{src: s, inner: inner, at: opts.ResourceVersion,
		result: make(chan watch.Event), done: make(chan struct{})}
	go w.run(ctx)
	return w, nil
}

// planesWatch is the informer's watch: the cache's events of every plane,
// converted, and the inherited objects a plane gains or loses.
type planesWatch struct {
	src    *source
	inner  watch.Interface
	result chan watch.Event
	done   chan struct{}
	// at is the resourceVersion the stream has reached. An inherited
	// object keeps its template's (older) resourceVersion, as the plane
	// serves it: a bookmark at the stream's after it keeps the informer's
	// place from going back.
	at string
}

func (w *planesWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *planesWatch) Stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
}

func (w *planesWatch) run(ctx context.Context) {
	defer close(w.result)
	defer w.inner.Stop()
	for {
		var out []watch.Event
		// inherited: out carries a template's resourceVersion.
		inherited := false
		var looked map[string][]chan<- expectation
		var expects map[string]expectation
		// through: the cache's revision this round's events take the
		// informer to ("": a look at inherited objects, no revision).
		through := ""
		select {
		case <-w.done:
			return
		case <-ctx.Done():
			return
		case ev, ok := <-w.inner.ResultChan():
			if !ok {
				return
			}
			if ev.Type != watch.Error {
				w.at = resourceVersion(ev.Object)
				through = w.at
			}
			out, inherited = w.src.event(ctx, ev)
		case <-w.src.signal:
			looked = w.src.takePending()
			expects = make(map[string]expectation, len(looked))
			// One read of each template's view for all the planes looked
			// at together: a Fleet's members come in bursts, and reading
			// their template's records again for each was a tenth of the
			// server's CPU while 1,000 members were made.
			l := w.src.layers(ctx)
			for plane := range looked {
				events := w.src.reconcile(ctx, l, plane)
				expects[plane] = expectationOf(events)
				out = append(out, events...)
			}
			inherited = len(out) > 0
		}
		if inherited && w.at != "" {
			out = append(out, w.src.bookmark(w.at, nil))
		}
		for _, ev := range out {
			select {
			case w.result <- ev:
			case <-w.done:
				// The next list finds what these planes inherit.
				answer(looked, nil)
				return
			}
		}
		answer(looked, expects)
		w.src.handedThrough(through)
	}
}

// answer tells those waiting for a look at planes what the informer is to
// hold of each (nothing known: nil).
func answer(looked map[string][]chan<- expectation, expects map[string]expectation) {
	for plane, waiters := range looked {
		for _, waiter := range waiters {
			waiter <- expects[plane]
		}
	}
}

// expectationOf is what the informer holds once it took events.
func expectationOf(events []watch.Event) expectation {
	out := make(expectation, len(events))
	for _, ev := range events {
		out[key(ev.Object)] = ev.Type != watch.Deleted
	}
	return out
}

func resourceVersion(obj runtime.Object) string {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return accessor.GetResourceVersion()
}

// event converts one event of the cache. A record's change is its plane's
// object changing; its removal is the object's deletion unless the plane
// inherits an object at its key (a reset removed an override or a
// tombstone): then that object is back. An object the controllers do not
// want (any more: its plane's simulation was turned off) is a deletion,
// which the informer ignores for an unknown key.
func (s *source) event(ctx context.Context, ev watch.Event) (events []watch.Event, inherited bool) {
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted:
	case watch.Bookmark:
		return []watch.Event{s.bookmark(resourceVersion(ev.Object), ev.Object)}, false
	default:
		return []watch.Event{ev}, false
	}
	obj := ev.Object
	if c, ok := obj.(runtime.CacheableObject); ok {
		obj = c.GetObject()
	}
	plane := s.planeOf(obj)
	if s.deferEvent(plane, ev) {
		return nil, false
	}
	converted, ok := s.convert(obj, plane)
	if !ok {
		return nil, false
	}
	k := key(converted)
	if ev.Type == watch.Deleted {
		if back, ok := s.inheritedAt(ctx, plane, obj); ok {
			// The record and the object it hid are two versions of one
			// object, the second older: told as its deletion and
			// creation, so that a controller tracking generations (the
			// EndpointSlice controller's) forgets the newer one.
			var out []watch.Event
			if s.tell(watch.Deleted, plane, k, nil, false) {
				out = append(out, watch.Event{Type: watch.Deleted, Object: converted})
			}
			s.tell(watch.Added, plane, k, back, true)
			return append(out, watch.Event{Type: watch.Added, Object: back}), true
		}
	}
	typ := ev.Type
	if typ != watch.Deleted && (planestorage.IsTombstone(obj) || !s.wanted(plane, converted)) {
		typ = watch.Deleted
	}
	if !s.tell(typ, plane, k, converted, false) {
		return nil, false
	}
	return []watch.Event{{Type: typ, Object: converted}}, false
}

// reconcile returns the events that make what the informer holds of
// plane's inherited objects what plane inherits now, as l reads it (the
// planes looked at together share their templates' views).
func (s *source) reconcile(ctx context.Context, l *layers, plane string) []watch.Event {
	if s.templates == nil {
		return nil
	}
	deferred := s.takeDeferred(plane)
	want, err := l.inherited(s, plane)
	if err != nil {
		logrus.WithError(err).Warnf("simulation: reading what plane %s inherits", plane)
		return s.replay(ctx, deferred)
	}
	held := s.heldBy(plane)
	var out []watch.Event
	for k, h := range held {
		if _, still := want[k]; h.inherited && !still && s.tell(watch.Deleted, plane, k, nil, true) {
			out = append(out, watch.Event{Type: watch.Deleted, Object: h.obj})
		}
	}
	for k, obj := range want {
		typ := watch.Added
		if h, ok := held[k]; ok {
			if !h.inherited {
				continue
			}
			typ = watch.Modified
		}
		s.tell(typ, plane, k, obj, true)
		out = append(out, watch.Event{Type: typ, Object: obj})
	}
	return append(out, s.replay(ctx, deferred)...)
}

// awaits marks plane as about to be looked at again: until then the
// events of its own records wait, so that no controller hears of a
// member's change before it holds what the member inherits (its
// Deployment before the ReplicaSet it inherited).
func (s *source) awaits(plane string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deferred == nil {
		s.deferred = map[string][]watch.Event{}
	}
	if _, ok := s.deferred[plane]; !ok {
		s.deferred[plane] = nil
	}
}

// deferEvent keeps ev for later and reports true if plane awaits a look.
func (s *source) deferEvent(plane string, ev watch.Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	events, awaiting := s.deferred[plane]
	if awaiting {
		s.deferred[plane] = append(events, ev)
	}
	return awaiting
}

// takeDeferred ends plane's wait and returns the events that waited.
func (s *source) takeDeferred(plane string) []watch.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	events := s.deferred[plane]
	delete(s.deferred, plane)
	return events
}

// replay converts events that waited, now that their plane was looked at.
func (s *source) replay(ctx context.Context, events []watch.Event) []watch.Event {
	var out []watch.Event
	for _, ev := range events {
		converted, _ := s.event(ctx, ev)
		out = append(out, converted...)
	}
	return out
}

// bookmark is a bookmark at resourceVersion rv, with from's annotations
// (the end of the initial events) if given.
func (s *source) bookmark(rv string, from runtime.Object) watch.Event {
	out := s.kind.object()
	if to, err := meta.Accessor(out); err == nil {
		to.SetResourceVersion(rv)
		if from != nil {
			if f, err := meta.Accessor(from); err == nil {
				to.SetAnnotations(f.GetAnnotations())
			}
		}
	}
	return watch.Event{Type: watch.Bookmark, Object: out}
}
