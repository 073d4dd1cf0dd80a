package controllers

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	planestorage "kplane.dev/kplane/planes/storage"
)

// Subscriber is told about the objects of the resources it asked for, in
// every plane. Objects are shared with the watch cache: read, never modify.
type Subscriber interface {
	// Wants reports whether the subscriber wants events of resource.
	Wants(resource schema.GroupResource) bool
	Upsert(resource schema.GroupResource, obj runtime.Object)
	Delete(resource schema.GroupResource, obj runtime.Object)
}

// LateStoreSubscriber is told when a storage built while the server runs
// (the first CRD of a custom resource) has delivered its first full list:
// objects created and deleted before that list were never seen, and what
// depended on them must be looked at again.
type LateStoreSubscriber interface {
	StoreSynced(resource schema.GroupResource)
}

// hub follows every plane-scoped storage once and fans its events out.
type hub struct {
	registry    *planestorage.Registry
	subscribers []Subscriber

	mu sync.Mutex
	// pending counts the storages whose first list has not been delivered.
	pending  int
	synced   chan struct{}
	startup  atomic.Bool
	followed map[*planestorage.Store]bool
}

func newHub(registry *planestorage.Registry, subscribers []Subscriber) *hub {
	return &hub{registry: registry, subscribers: subscribers, synced: make(chan struct{}),
		followed: map[*planestorage.Store]bool{}}
}

// run follows every storage built so far and every one built later, until
// ctx is done. synced is closed once the storages that existed at start
// have delivered their first full list.
func (h *hub) run(ctx context.Context) {
	h.startup.Store(true)
	h.registry.OnNewStore(func(s *planestorage.Store) {
		// The registry keeps the callback after the term that gave it
		// ended: a later storage is not followed by an ended hub.
		if ctx.Err() == nil {
			h.follow(ctx, s)
		}
	})
	h.mu.Lock()
	h.startup.Store(false)
	if h.pending == 0 {
		close(h.synced)
	}
	h.mu.Unlock()
}

func (h *hub) follow(ctx context.Context, s *planestorage.Store) {
	var subs []Subscriber
	for _, sub := range h.subscribers {
		if sub.Wants(s.Resource()) {
			subs = append(subs, sub)
		}
	}
	h.mu.Lock()
	if len(subs) == 0 || h.followed[s] {
		h.mu.Unlock()
		return
	}
	h.followed[s] = true
	counted := h.startup.Load()
	if counted {
		h.pending++
	}
	h.mu.Unlock()

	fctx, cancel := s.UntilGone(ctx)
	context.AfterFunc(fctx, func() {
		cancel()
		h.mu.Lock()
		delete(h.followed, s)
		h.mu.Unlock()
	})
	fan := &fanout{resource: s.Resource(), subs: subs}
	if counted {
		fan.onFirstSync = h.storeSynced
	} else {
		fan.onFirstSync = func() {
			for _, sub := range subs {
				if late, ok := sub.(LateStoreSubscriber); ok {
					late.StoreSynced(s.Resource())
				}
			}
		}
	}
	go planestorage.Follow(fctx, s, fan)
}

func (h *hub) storeSynced() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pending--
	if h.pending == 0 && !h.startup.Load() {
		close(h.synced)
	}
}

// fanout is the storage.Handler of one followed storage.
type fanout struct {
	resource    schema.GroupResource
	subs        []Subscriber
	once        sync.Once
	onFirstSync func()
}

func (f *fanout) Upsert(obj runtime.Object) {
	for _, s := range f.subs {
		s.Upsert(f.resource, obj)
	}
}

func (f *fanout) Delete(obj runtime.Object) {
	for _, s := range f.subs {
		s.Delete(f.resource, obj)
	}
}

func (f *fanout) Synced() {
	if f.onFirstSync != nil {
		f.once.Do(f.onFirstSync)
	}
}
