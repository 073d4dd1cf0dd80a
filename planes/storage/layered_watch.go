package storage

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
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
	// The cache applies the selectors to the plane's records as it does
	// for any watch: a record that starts matching is ADDED, one that stops
	// is DELETED with its previous content. Tombstones keep the deleted
	// object's last state, so they match as it did.
	inner.Predicate = planePredicate(pred, plane)
	w, err := s.Interface.Watch(ctx, scoped, inner)
	if err != nil {
		return nil, err
	}
	lw := &layeredWatch{store: s, plane: plane, chain: chain, pred: pred, inner: w, key: scoped, opts: inner,
		result: make(chan watch.Event), done: make(chan struct{})}
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
	store *Store
	plane string
	chain []string
	pred  storage.SelectionPredicate
	inner watch.Interface
	// key and opts opened inner; a first event that says the cache's
	// history does not reach opts' resourceVersion reopens it on the
	// datastore (resumeFromDatastore).
	key    string
	opts   storage.ListOptions
	result chan watch.Event
	done   chan struct{}
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
	defer func() { w.inner.Stop() }()
	for _, obj := range initial {
		if !w.send(watch.Event{Type: watch.Added, Object: obj}) {
			return
		}
	}
	if end != nil && !w.send(watch.Event{Type: watch.Bookmark, Object: end}) {
		return
	}
	for first := true; ; first = false {
		select {
		case <-w.done:
			return
		case <-ctx.Done():
			return
		case ev, ok := <-w.inner.ResultChan():
			if !ok {
				return
			}
			if first {
				if resumed, ok, err := w.store.resumeFromDatastore(ctx, w.key, w.opts, ev); ok {
					w.inner.Stop()
					if err != nil {
						w.send(errorEvent(err))
						return
					}
					w.inner = resumed
					continue
				}
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
	return w.store.recordEvent(ctx, w.plane, w.chain, ev, w.pred, false)
}

// LayerEvent tells an event of plane's own records, from a cross-plane
// watch without selectors, as plane's clients see it: false means the
// event is no change to them. Events of a plane made from nothing are
// what they are.
func (s *Store) LayerEvent(ctx context.Context, plane string, ev watch.Event) (watch.Event, bool) {
	chain := s.registry.chain(plane)
	if len(chain) == 0 {
		return ev, true
	}
	return s.recordEvent(ctx, plane, chain, ev, storage.Everything, true)
}

// recordEvent tells the event of a record of a plane made from chain, as
// a watch with predicate pred reports it: a first override of an inherited
// object the client may hold is MODIFIED, a tombstone is DELETED, an
// object created again over one is ADDED, and a tombstone's removal is no
// event. A DELETED event carries the record as it was: a tombstone's
// DELETED (it stopped matching, or a reset removed it) tells nothing new.
// With removals, the event comes from a watch without selectors, so a
// DELETED is a record's removal (a reset): the inherited object, if any,
// is back, MODIFIED.
func (s *Store) recordEvent(ctx context.Context, plane string, chain []string, ev watch.Event, pred storage.SelectionPredicate, removals bool) (watch.Event, bool) {
	if ev.Type != watch.Added && ev.Type != watch.Modified && ev.Type != watch.Deleted {
		return ev, true
	}
	state := layerState(ev.Object)
	typ := ev.Type
	switch {
	case ev.Type == watch.Deleted && state == LayerDeleted:
		return ev, false
	case state == LayerDeleted:
		typ = watch.Deleted
	case state == LayerRecreated && ev.Type == watch.Modified:
		typ = watch.Added
	case ev.Type == watch.Deleted && removals:
		if back, ok := s.inheritedAgain(ctx, plane, chain, ev.Object); ok {
			return watch.Event{Type: watch.Modified, Object: back}, true
		}
	case ev.Type == watch.Added && state == "":
		// The first record of an object the plane inherited changes it,
		// for a client that held it (it matched).
		key, err := s.objectKey(ev.Object)
		if err != nil {
			return ev, true
		}
		if below, err := s.inherited(ctx, chain, key); err == nil && below != nil && sameUID(below, ev.Object) {
			if matches, err := pred.Matches(below); err == nil && matches {
				typ = watch.Modified
			}
		}
	}
	obj := ev.Object
	if state != "" {
		obj = mutable(obj)
		if err := setLayerState(obj, ""); err != nil {
			return ev, true
		}
	}
	return watch.Event{Type: typ, Object: obj}, true
}

// inheritedAgain is what plane serves at the key of a removed record:
// the inherited object, at the removal's revision (followers keep their
// place by it).
func (s *Store) inheritedAgain(ctx context.Context, plane string, chain []string, removed runtime.Object) (runtime.Object, bool) {
	key, err := s.objectKey(removed)
	if err != nil {
		return nil, false
	}
	below, err := s.inherited(ctx, chain, key)
	if err != nil || below == nil {
		return nil, false
	}
	rv, err := s.Versioner().ObjectResourceVersion(removed)
	if err != nil {
		return nil, false
	}
	back := below.DeepCopyObject()
	if served(back, plane) != nil || s.Versioner().UpdateObject(back, rv) != nil {
		return nil, false
	}
	return back, true
}

func sameUID(a, b runtime.Object) bool {
	am, err1 := meta.Accessor(a)
	bm, err2 := meta.Accessor(b)
	return err1 == nil && err2 == nil && am.GetUID() == bm.GetUID()
}
