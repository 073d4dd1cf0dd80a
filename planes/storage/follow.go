package storage

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
)

// Handler receives the state of one resource across every plane, in the
// order it changes. Objects are shared with the watch cache: read them,
// never modify them.
type Handler interface {
	// Upsert is an object that appeared or changed.
	Upsert(obj runtime.Object)
	// Delete is an object that is gone. After a relist it may be only the
	// object's identity (a *metav1.PartialObjectMetadata).
	Delete(obj runtime.Object)
	// Synced is called after every (re)list, once the handler has seen the
	// full state.
	Synced()
}

// ObjectKey identifies an object across planes: plane/namespace/name.
func ObjectKey(obj runtime.Object) string {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return planes.OfObject(obj) + "/" + accessor.GetNamespace() + "/" + accessor.GetName()
}

// Follow feeds h with every plane's objects of s: a consistent list, then
// the watch from the list's resourceVersion; after any watch failure it
// lists again and reports what vanished meanwhile as deletes. It is the one
// cross-plane watch a controller needs, whatever the number of planes, and
// returns when ctx is done. Keys are plane-qualified, so same-named objects
// of different planes never collapse (client-go informers key by
// namespace/name and cannot be used here).
func Follow(ctx context.Context, s *Store, h Handler) {
	h = tombstonesAsDeletes{h}
	ctx, cancel := s.UntilGone(ctx)
	defer cancel()
	all := planes.WithAllPlanes(ctx)
	known := &seen{uids: map[string]types.UID{}}
	backoff := retryBackoff()
	for ctx.Err() == nil {
		rv, err := relist(all, s, h, known)
		if err == nil {
			err = follow(all, s, h, known, rv)
		}
		if err != nil && ctx.Err() == nil {
			logrus.WithError(err).WithField("resource", s.resource.String()).Debug("cross-plane watch restarts")
		}
		if !sleepCtx(ctx, backoff.Step()) {
			return
		}
	}
}

// retryBackoff paces the restarts of a cross-plane watch.
func retryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 7, Cap: 5 * time.Second}
}

// sleepCtx waits d and reports whether ctx is still alive.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// seen is what a handler has been given, so that a relist can report what
// vanished meanwhile: per object only its key and uid (the objects
// themselves stay in the watch cache), and the one kind of the storage.
type seen struct {
	uids map[string]types.UID
	gvk  schema.GroupVersionKind
}

func (k *seen) add(obj runtime.Object) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	k.uids[ObjectKey(obj)] = accessor.GetUID()
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() {
		k.gvk = gvk
	}
}

// tombstone rebuilds the identity of the object known under key
// (plane/namespace/name).
func (k *seen) tombstone(key string, uid types.UID) runtime.Object {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) != 3 {
		return nil
	}
	t := &metav1.PartialObjectMetadata{}
	t.SetGroupVersionKind(k.gvk)
	t.Name, t.Namespace, t.UID = parts[2], parts[1], uid
	t.Annotations = map[string]string{planes.Annotation: parts[0]}
	return t
}

func relist(ctx context.Context, s *Store, h Handler, known *seen) (string, error) {
	list := s.NewList()
	if err := s.GetList(ctx, s.resourcePrefix, storage.ListOptions{
		ResourceVersion: "0", Recursive: true, Predicate: storage.Everything,
	}, list); err != nil {
		return "", fmt.Errorf("listing %s: %w", s.resource, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return "", err
	}
	listed := make(map[string]bool, len(items))
	for _, obj := range items {
		if !s.Owns(planes.OfObject(obj)) {
			continue
		}
		listed[ObjectKey(obj)] = true
		known.add(obj)
		h.Upsert(obj)
	}
	for key, uid := range known.uids {
		if !listed[key] {
			delete(known.uids, key)
			if t := known.tombstone(key, uid); t != nil {
				h.Delete(t)
			}
		}
	}
	h.Synced()
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return "", err
	}
	return listMeta.GetResourceVersion(), nil
}

func follow(ctx context.Context, s *Store, h Handler, known *seen, rv string) error {
	w, err := s.Watch(ctx, s.resourcePrefix, storage.ListOptions{
		ResourceVersion: rv, Recursive: true, Predicate: storage.Everything,
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch of %s closed", s.resource)
			}
			obj := unwrap(ev.Object)
			switch ev.Type {
			case watch.Added, watch.Modified:
				if !s.Owns(planes.OfObject(obj)) {
					continue
				}
				known.add(obj)
				h.Upsert(obj)
			case watch.Deleted:
				key := ObjectKey(obj)
				if _, given := known.uids[key]; !given && !s.Owns(planes.OfObject(obj)) {
					continue
				}
				delete(known.uids, key)
				h.Delete(obj)
			case watch.Error:
				return fmt.Errorf("watch of %s: %v", s.resource, ev.Object)
			}
		}
	}
}

// unwrap returns the object inside the cacher's serialization wrapper.
func unwrap(obj runtime.Object) runtime.Object {
	if c, ok := obj.(runtime.CacheableObject); ok {
		return c.GetObject()
	}
	return obj
}

// LayerHandler is a Handler that keeps track of what planes inherit from
// their templates, and so must know when a plane hides an inherited object
// (a tombstone appears) and when it stops hiding it (a reset removes the
// tombstone).
type LayerHandler interface {
	Handler
	Hide(tombstone runtime.Object)
	Unhide(tombstone runtime.Object)
}

// tombstonesAsDeletes hands a plane's tombstone (its record of an object it
// deleted from its template) to a handler as the deletion it stands for.
type tombstonesAsDeletes struct{ Handler }

func (t tombstonesAsDeletes) Upsert(obj runtime.Object) {
	if !IsTombstone(obj) {
		t.Handler.Upsert(obj)
		return
	}
	if l, ok := t.Handler.(LayerHandler); ok {
		l.Hide(obj)
		return
	}
	t.Handler.Delete(obj)
}

func (t tombstonesAsDeletes) Delete(obj runtime.Object) {
	if !IsTombstone(obj) {
		t.Handler.Delete(obj)
		return
	}
	// A tombstone removed: the plane inherits the object again (reset).
	// Only a handler that tracks inheritance has something to do.
	if l, ok := t.Handler.(LayerHandler); ok {
		l.Unhide(obj)
	}
}
