package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	all := planes.WithAllPlanes(ctx)
	// known holds only the identity of what the handler has seen, so that a
	// relist can report what vanished: objects stay in the watch cache.
	known := map[string]runtime.Object{}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		rv, err := relist(all, s, h, known)
		if err == nil {
			err = follow(all, s, h, known, rv)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			logrus.WithError(err).WithField("resource", s.resource.String()).Debug("cross-plane watch restarts")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

func relist(ctx context.Context, s *Store, h Handler, known map[string]runtime.Object) (string, error) {
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
	seen := make(map[string]bool, len(items))
	for _, obj := range items {
		key := ObjectKey(obj)
		seen[key] = true
		known[key] = tombstone(obj)
		h.Upsert(obj)
	}
	for key, obj := range known {
		if !seen[key] {
			delete(known, key)
			h.Delete(obj)
		}
	}
	h.Synced()
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return "", err
	}
	return listMeta.GetResourceVersion(), nil
}

func follow(ctx context.Context, s *Store, h Handler, known map[string]runtime.Object, rv string) error {
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
				known[ObjectKey(obj)] = tombstone(obj)
				h.Upsert(obj)
			case watch.Deleted:
				delete(known, ObjectKey(obj))
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

// tombstone keeps what identifies obj (kind, plane, namespace, name, uid):
// enough to report its deletion.
func tombstone(obj runtime.Object) runtime.Object {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return obj
	}
	t := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{
		APIVersion: obj.GetObjectKind().GroupVersionKind().GroupVersion().String(),
		Kind:       obj.GetObjectKind().GroupVersionKind().Kind,
	}}
	t.Name, t.Namespace, t.UID = accessor.GetName(), accessor.GetNamespace(), accessor.GetUID()
	t.Annotations = map[string]string{planes.Annotation: planes.OfObject(obj)}
	return t
}
