package storage

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
)

// watchLayered watches a plane made from a template. The template is
// read-only while the plane exists, so every change is a record of the
// plane's own layer: one plane-scoped watch of the shared cache sees them
// all, and each is told as what it is to a client of the plane (a first
// override of an inherited object is MODIFIED, a tombstone is DELETED, an
// object created again over one is ADDED). The initial state, when one is
// asked for, is the merged view.
func (s *Store) watchLayered(ctx context.Context, plane string, chain []string, key string, opts storage.ListOptions) (watch.Interface, error) {
	pred := opts.Predicate
	var initial []runtime.Object
	from := opts.ResourceVersion
	sendInitial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	if sendInitial || (opts.SendInitialEvents == nil && (from == "" || from == "0")) {
		list := s.newListFunc()
		listOpts := storage.ListOptions{ResourceVersion: "0", Recursive: opts.Recursive, Predicate: storage.SelectionPredicate{
			Label: pred.Label, Field: pred.Field, GetAttrs: pred.GetAttrs}}
		if err := s.getListLayered(ctx, plane, chain, key, listOpts, list); err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		initial = items
		listMeta, err := meta.ListAccessor(list)
		if err != nil {
			return nil, err
		}
		from = listMeta.GetResourceVersion()
	}
	scoped, err := scopeKey(s.resourcePrefix, plane, key)
	if err != nil {
		return nil, err
	}
	inner := opts
	inner.ResourceVersion, inner.SendInitialEvents = from, nil
	inner.ResourceVersionMatch = ""
	inner.Predicate = planePredicate(storage.SelectionPredicate{Label: labels.Everything(), Field: fields.Everything(),
		GetAttrs: pred.GetAttrs, AllowWatchBookmarks: pred.AllowWatchBookmarks}, plane)
	w, err := s.Interface.Watch(ctx, scoped, inner)
	if err != nil {
		return nil, err
	}
	lw := &layeredWatch{store: s, plane: plane, chain: chain, pred: pred, inner: w,
		result: make(chan watch.Event), done: make(chan struct{})}
	if !pred.Empty() {
		lw.sent = map[string]bool{}
	}
	var end runtime.Object
	if sendInitial && pred.AllowWatchBookmarks {
		end = s.newFunc()
		if err := s.Versioner().UpdateObject(end, mustParse(s, from)); err != nil {
			w.Stop()
			return nil, err
		}
		if err := storage.AnnotateInitialEventsEndBookmark(end); err != nil {
			w.Stop()
			return nil, err
		}
	}
	go lw.run(ctx, initial, end)
	return lw, nil
}

func mustParse(s *Store, rv string) uint64 {
	v, err := s.Versioner().ParseResourceVersion(rv)
	if err != nil {
		return 0
	}
	return v
}

type layeredWatch struct {
	store  *Store
	plane  string
	chain  []string
	pred   storage.SelectionPredicate
	inner  watch.Interface
	result chan watch.Event
	done   chan struct{}
	// sent holds the keys a selector watch has told its client about, so
	// that an object that stops matching is DELETED for it (nil without
	// selectors).
	sent map[string]bool
}

func (w *layeredWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *layeredWatch) Stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
}

func (w *layeredWatch) run(ctx context.Context, initial []runtime.Object, end runtime.Object) {
	defer close(w.result)
	defer w.inner.Stop()
	for _, obj := range initial {
		if !w.send(watch.Event{Type: watch.Added, Object: obj}) {
			return
		}
		if w.sent != nil {
			if k, err := w.store.objectKey(obj); err == nil {
				w.sent[k] = true
			}
		}
	}
	if end != nil && !w.send(watch.Event{Type: watch.Bookmark, Object: end}) {
		return
	}
	for {
		select {
		case <-w.done:
			return
		case <-ctx.Done():
			return
		case ev, ok := <-w.inner.ResultChan():
			if !ok {
				return
			}
			out, keep := w.translate(ctx, ev)
			if keep && !w.send(out) {
				return
			}
		}
	}
}

func (w *layeredWatch) send(ev watch.Event) bool {
	select {
	case w.result <- ev:
		return true
	case <-w.done:
		return false
	}
}

// translate tells a record's event as its plane's client sees it.
func (w *layeredWatch) translate(ctx context.Context, ev watch.Event) (watch.Event, bool) {
	if ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted {
		return ev, true
	}
	state := layerState(ev.Object)
	key, err := w.store.objectKey(ev.Object)
	if err != nil {
		return ev, true
	}
	typ := ev.Type
	switch {
	case ev.Type == watch.Deleted && state == LayerDeleted:
		// A tombstone removed (the plane was reset): not a client's change.
		return ev, false
	case state == LayerDeleted:
		typ = watch.Deleted
	case state == LayerRecreated && ev.Type == watch.Modified:
		typ = watch.Added
	case ev.Type == watch.Added:
		// The first record of an object the plane inherited changes it.
		if below, err := w.store.inherited(ctx, w.chain, key); err == nil && below != nil && sameUID(below, ev.Object) {
			typ = watch.Modified
		}
	}
	obj := ev.Object
	if state != "" {
		obj = mutable(obj)
		if err := setLayerState(obj, ""); err != nil {
			return ev, true
		}
	}
	return w.filter(watch.Event{Type: typ, Object: obj}, key)
}

// filter applies the watch's selectors: an object that starts matching is
// ADDED, one that stops is DELETED. An object the watch has not told about
// (it started from a resourceVersion) and that does not match is DELETED
// too: the client may hold it.
func (w *layeredWatch) filter(ev watch.Event, key string) (watch.Event, bool) {
	if w.sent == nil {
		return ev, true
	}
	matches, err := w.pred.Matches(ev.Object)
	if err != nil {
		return ev, false
	}
	known, told := w.sent[key]
	switch {
	case ev.Type == watch.Deleted:
		delete(w.sent, key)
		return ev, matches || (told && known)
	case matches:
		w.sent[key] = true
		if told && known {
			ev.Type = watch.Modified
		} else if ev.Type != watch.Modified {
			ev.Type = watch.Added
		}
		return ev, true
	default:
		delete(w.sent, key)
		if ev.Type == watch.Added {
			return ev, false
		}
		ev.Type = watch.Deleted
		return ev, true
	}
}

func sameUID(a, b runtime.Object) bool {
	am, err1 := meta.Accessor(a)
	bm, err2 := meta.Accessor(b)
	return err1 == nil && err2 == nil && am.GetUID() == bm.GetUID()
}
