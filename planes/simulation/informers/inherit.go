package informers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// maxTemplates bounds a walk down a chain of templates; lifecycle refuses
// cycles, this only keeps a corrupt chain from looping.
const maxTemplates = 16

// records are one plane's own records of the resource, tombstones
// included, by namespace/name.
type records map[string]runtime.Object

// recordKey is an object's namespace/name within its plane.
func recordKey(obj runtime.Object) string {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	if ns := accessor.GetNamespace(); ns != "" {
		return ns + "/" + accessor.GetName()
	}
	return accessor.GetName()
}

// layers reads planes' own records and the views they make, each once.
type layers struct {
	own   func(plane string) (records, error)
	views map[string]records
}

// layers returns a reader of the planes' records from the watch cache.
func (s *source) layers(ctx context.Context) *layers {
	return &layers{own: func(p string) (records, error) { return s.ownRecords(ctx, p) }, views: map[string]records{}}
}

// view returns what plane shows of the resource: its own records over its
// template's view, without what it deleted (tombstones are dropped).
func (l *layers) view(s *source, plane string, depth int) (records, error) {
	if v, ok := l.views[plane]; ok {
		return v, nil
	}
	if depth > maxTemplates {
		return nil, fmt.Errorf("plane %s stands on more than %d templates", plane, maxTemplates)
	}
	own, err := l.own(plane)
	if err != nil {
		return nil, err
	}
	v := records{}
	if template := s.templates.Inherits(plane); template != "" {
		below, err := l.view(s, template, depth+1)
		if err != nil {
			return nil, err
		}
		for k, obj := range below {
			v[k] = obj
		}
	}
	for k, obj := range own {
		if planestorage.IsTombstone(obj) {
			delete(v, k)
		} else {
			v[k] = obj
		}
	}
	l.views[plane] = v
	return v, nil
}

// inherited returns the objects plane inherits, converted as plane's and
// by informer key: its template's view where plane has no record of its
// own (a tombstone is one). None when plane inherits nothing or its
// objects are not to be seen.
func (l *layers) inherited(s *source, plane string) (map[string]runtime.Object, error) {
	template := s.templates.Inherits(plane)
	if template == "" || (s.off != nil && s.off(plane)) {
		return nil, nil
	}
	below, err := l.view(s, template, 1)
	if err != nil {
		return nil, err
	}
	own, err := l.own(plane)
	if err != nil {
		return nil, err
	}
	out := map[string]runtime.Object{}
	for k, obj := range below {
		if _, shadowed := own[k]; shadowed || !s.kept(k, obj, plane) {
			continue
		}
		// The plane's simulation is on (above): only kind.keep decides.
		if converted, ok := s.convert(obj, plane); ok {
			out[key(converted)] = converted
		}
	}
	return out, nil
}

// maxKeptMemo bounds the decisions kept remembers; past it they are
// forgotten and made again.
const maxKeptMemo = 16384

// kept reports whether the controllers want a template's record at k at
// all (kind.keep), deciding once per version of the record: a Fleet's
// members each converted every selector-less Service of their template,
// only to drop it (1 % of the server's CPU while 1,000 members of a
// 500-object template were made). kind.keep looks at what folding a plane
// in leaves as it is, so one decision serves every plane.
func (s *source) kept(k string, obj runtime.Object, plane string) bool {
	if s.kind.keep == nil {
		return true
	}
	rv := resourceVersion(obj)
	if rv == "" {
		converted, ok := s.convert(obj, plane)
		return ok && s.kind.keep(converted)
	}
	version := k + "@" + rv
	s.keptMu.Lock()
	decided, ok := s.keptMemo[version]
	s.keptMu.Unlock()
	if ok {
		return decided
	}
	converted, ok := s.convert(obj, plane)
	decided = ok && s.kind.keep(converted)
	s.keptMu.Lock()
	if s.keptMemo == nil || len(s.keptMemo) >= maxKeptMemo {
		s.keptMemo = map[string]bool{}
	}
	s.keptMemo[version] = decided
	s.keptMu.Unlock()
	return decided
}

// inheritedAtList returns the inherited objects of every plane made from a
// template, by plane, from the records of a list of every plane. A member
// without a record of the resource is found through its template's
// dependents.
func (s *source) inheritedAtList(items []runtime.Object) map[string][]runtime.Object {
	if s.templates == nil {
		return nil
	}
	byPlane := map[string]records{}
	for _, item := range items {
		plane := planes.OfObject(item)
		if byPlane[plane] == nil {
			byPlane[plane] = records{}
		}
		byPlane[plane][recordKey(item)] = item
	}
	l := &layers{own: func(plane string) (records, error) { return byPlane[plane], nil }, views: map[string]records{}}
	out := map[string][]runtime.Object{}
	queue := make([]string, 0, len(byPlane))
	for plane := range byPlane {
		queue = append(queue, plane)
	}
	seen := map[string]bool{}
	for len(queue) > 0 {
		template := queue[0]
		queue = queue[1:]
		for _, member := range s.templates.Dependents(template) {
			if seen[member] || s.templates.Inherits(member) != template {
				continue
			}
			seen[member] = true
			// A member may be the template of others in turn.
			queue = append(queue, member)
			objs, err := l.inherited(s, member)
			if err != nil {
				continue
			}
			for _, obj := range objs {
				out[member] = append(out[member], obj)
			}
		}
	}
	return out
}

// ownRecords reads plane's own records of the resource from the watch
// cache.
func (s *source) ownRecords(ctx context.Context, plane string) (records, error) {
	if s.mayHoldOwn != nil && !s.mayHoldOwn(plane, s.store) {
		return records{}, nil
	}
	list := s.store.NewList()
	if err := s.store.GetList(planestorage.WithOwnLayer(planes.WithPlane(ctx, plane)), s.store.ResourcePrefix(),
		storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: storage.Everything}, list); err != nil {
		return nil, fmt.Errorf("listing %s of plane %s: %w", s.store.Resource(), plane, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make(records, len(items))
	for _, item := range items {
		out[recordKey(item)] = item
	}
	return out, nil
}

// inheritedAt returns what plane shows at the key of obj, a record of its
// own just removed: the object it inherits there, if any.
func (s *source) inheritedAt(ctx context.Context, plane string, obj runtime.Object) (runtime.Object, bool) {
	if s.templates == nil {
		return nil, false
	}
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return nil, false
	}
	storageKey := s.store.ResourcePrefix() + "/" + accessor.GetName()
	if ns := accessor.GetNamespace(); ns != "" {
		storageKey = s.store.ResourcePrefix() + "/" + ns + "/" + accessor.GetName()
	}
	layer := plane
	for range maxTemplates {
		layer = s.templates.Inherits(layer)
		if layer == "" {
			return nil, false
		}
		rec := s.store.New()
		err := s.store.Get(planestorage.WithOwnLayer(planes.WithPlane(ctx, layer)), storageKey,
			storage.GetOptions{ResourceVersion: "0"}, rec)
		if storage.IsNotFound(err) {
			continue
		}
		if err != nil || planestorage.IsTombstone(rec) {
			return nil, false
		}
		converted, ok := s.convert(rec, plane)
		if !ok || !s.wanted(plane, converted) {
			return nil, false
		}
		return converted, true
	}
	return nil, false
}
