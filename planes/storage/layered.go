package storage

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"

	"kplane.dev/kplane/planes"
)

// A plane made from a template stores only its own layer: the objects it
// created or changed (under its own keys, as any plane) and a tombstone for
// every template object it deleted. Reads resolve a key from the nearest
// layer that has a record for it; a template is read-only while it has
// dependents, so what a member inherits never changes under it.

// maxLayeredRetries bounds the retries of a write that raced another write
// of the same key (a create of an override or a tombstone).
const maxLayeredRetries = 16

// record reads the record plane's own layer holds at key (unscoped), or
// nil.
func (s *Store) record(ctx context.Context, plane, key string, opts storage.GetOptions) (runtime.Object, error) {
	scoped, err := scopeKey(s.resourcePrefix, plane, key)
	if err != nil {
		return nil, err
	}
	obj := s.newFunc()
	opts.IgnoreNotFound = false
	if err := s.Interface.Get(ctx, scoped, opts, obj); err != nil {
		if storage.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return obj, nil
}

// inherited returns what plane's templates (chain, nearest first) hold
// visibly at key: nil when none holds it or the nearest record is a
// tombstone. Templates are read-only while used, so their caches serve
// (templateRevision).
func (s *Store) inherited(ctx context.Context, chain []string, key string) (runtime.Object, error) {
	for _, layer := range chain {
		opts := storage.GetOptions{ResourceVersion: s.templateRevision(layer)}
		rec, err := s.record(ctx, layer, key, opts)
		if opts.ResourceVersion != "0" && storage.IsTooLargeResourceVersion(err) {
			rec, err = s.record(ctx, layer, key, storage.GetOptions{})
		}
		if err != nil {
			return nil, err
		}
		if rec != nil {
			if IsTombstone(rec) {
				return nil, nil
			}
			return rec, nil
		}
	}
	return nil, nil
}

// resolve returns plane's own record at key (nil if none) and, when that
// does not decide, the inherited object. Writes decide from it (decide),
// so the own layer is read from the datastore, never the cache: a write
// that raced another sees that write at once when it is decided again.
func (s *Store) resolve(ctx context.Context, plane string, chain []string, key string, opts storage.GetOptions) (own, below runtime.Object, err error) {
	return s.resolveWith(ctx, s.record, plane, chain, key, opts)
}

// resolveWith is resolve with the own layer read by readOwn.
func (s *Store) resolveWith(ctx context.Context, readOwn func(context.Context, string, string, storage.GetOptions) (runtime.Object, error),
	plane string, chain []string, key string, opts storage.GetOptions) (own, below runtime.Object, err error) {
	own, err = readOwn(ctx, plane, key, opts)
	if err != nil || own != nil {
		return own, nil, err
	}
	below, err = s.inherited(ctx, chain, key)
	return nil, below, err
}

func (s *Store) getLayered(ctx context.Context, plane string, chain []string, key string, opts storage.GetOptions, out runtime.Object) error {
	own, below, err := s.resolveWith(ctx, s.ownRecord, plane, chain, key, opts)
	if err != nil {
		return err
	}
	obj := own
	if obj == nil {
		obj = below
	}
	if obj == nil || IsTombstone(obj) {
		if opts.IgnoreNotFound {
			return runtime.SetZeroValue(out)
		}
		scoped, _ := scopeKey(s.resourcePrefix, plane, key)
		return storage.NewKeyNotFoundError(scoped, 0)
	}
	if err := served(obj, plane); err != nil {
		return err
	}
	return setInto(out, obj)
}

// setInto copies obj into out, both of the resource's type.
func setInto(out, obj runtime.Object) error {
	ov, iv := reflect.ValueOf(out), reflect.ValueOf(obj)
	if ov.Kind() != reflect.Pointer || iv.Kind() != reflect.Pointer || ov.Type() != iv.Type() {
		return fmt.Errorf("cannot copy %T into %T", obj, out)
	}
	ov.Elem().Set(iv.Elem())
	return nil
}

// templateRevision is the revision a template layer is read at from the
// watch cache: no older than every write of the resource this server
// acknowledged. A member can be made the moment after its template's last
// write, before the cache holds it, and the template never tells its
// members of a write (it is frozen from then on): a read of the cache as
// it was would miss the write for good, in an informer's first list as
// in a get. The cache waits for that write's own event; a base plane,
// written before the server serves, is read as the cache holds it.
func (s *Store) templateRevision(layer string) string {
	if planes.IsBase(layer) {
		return "0"
	}
	if rv, ok := s.acknowledged(); ok && rv > 0 {
		return strconv.FormatUint(rv, 10)
	}
	return "0"
}

// objectKey is the unscoped storage key of a stored object.
func (s *Store) objectKey(obj runtime.Object) (string, error) {
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	if ns := accessor.GetNamespace(); ns != "" {
		return s.resourcePrefix + "/" + ns + "/" + accessor.GetName(), nil
	}
	return s.resourcePrefix + "/" + accessor.GetName(), nil
}

// layerList reads the records of one layer under key (unscoped), keyed by
// their unscoped keys, and the list's resourceVersion.
func (s *Store) layerList(ctx context.Context, layer, key string, opts storage.ListOptions) (map[string]runtime.Object, string, error) {
	scoped, err := scopeKey(s.resourcePrefix, layer, key)
	if err != nil {
		return nil, "", err
	}
	opts.Predicate = storage.Everything
	list := s.newListFunc()
	if err := s.Interface.GetList(ctx, scoped, opts, list); err != nil {
		return nil, "", err
	}
	records := map[string]runtime.Object{}
	err = meta.EachListItem(list, func(obj runtime.Object) error {
		k, err := s.objectKey(obj)
		records[k] = obj
		return err
	})
	if err != nil {
		return nil, "", err
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return nil, "", err
	}
	return records, listMeta.GetResourceVersion(), nil
}

// merged is plane's view under key: every layer's records, nearest layer
// winning, tombstones dropped, objects in plane's served form, sorted by
// key. own are the options of plane's own layer's read; the templates'
// are read from the watch cache (templateRevision).
func (s *Store) merged(ctx context.Context, plane string, chain []string, key string, own storage.ListOptions) ([]string, map[string]runtime.Object, string, error) {
	view := map[string]runtime.Object{}
	var rv string
	for i, layer := range append([]string{plane}, chain...) {
		opts := own
		if i > 0 {
			opts = storage.ListOptions{ResourceVersion: s.templateRevision(layer), Recursive: own.Recursive}
			if opts.ResourceVersion != "0" {
				opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
			}
		}
		records, listRV, err := s.layerList(ctx, layer, key, opts)
		if opts.ResourceVersionMatch == metav1.ResourceVersionMatchNotOlderThan && i > 0 && storage.IsTooLargeResourceVersion(err) {
			// The cache did not catch up within its wait: the datastore.
			records, listRV, err = s.layerList(ctx, layer, key, storage.ListOptions{Recursive: own.Recursive})
		}
		if err != nil {
			return nil, nil, "", err
		}
		for k, obj := range records {
			// A nearer layer's record of a key wins.
			if _, nearer := view[k]; !nearer {
				view[k] = obj
			}
		}
		if i == 0 {
			rv = listRV
		}
	}
	keys := make([]string, 0, len(view))
	for k, obj := range view {
		if IsTombstone(obj) {
			delete(view, k)
			continue
		}
		if err := served(obj, plane); err != nil {
			return nil, nil, "", err
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, view, rv, nil
}

func (s *Store) getListLayered(ctx context.Context, plane string, chain []string, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if !opts.Recursive {
		return s.getSingleAsList(ctx, plane, chain, key, opts, listObj)
	}
	pred := opts.Predicate
	prefix, err := scopeKey(s.resourcePrefix, plane, key)
	if err != nil {
		return err
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	own := storage.ListOptions{ResourceVersion: opts.ResourceVersion, ResourceVersionMatch: opts.ResourceVersionMatch, Recursive: true}
	var start string
	if pred.Continue != "" {
		from, rv, err := storage.DecodeContinue(pred.Continue, prefix)
		if err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v", err))
		}
		start = from
		own.ResourceVersion, own.ResourceVersionMatch = fmt.Sprint(rv), metav1.ResourceVersionMatchExact
		if rv < 0 {
			// A token handed out for a compacted revision: continue at the
			// newest one.
			own.ResourceVersion, own.ResourceVersionMatch = "", ""
		}
	}
	merge := s.mergedFresh
	if pred.Limit > 0 {
		// A list in pages keeps the datastore: the next pages are read at
		// the first page's revision, which a compaction may otherwise be
		// past already (the cache's revision moves only with its
		// resource's writes).
		merge = s.merged
	}
	keys, view, rv, err := merge(ctx, plane, chain, key, own)
	if pred.Continue != "" && apierrors.IsResourceExpired(err) {
		return continueCompacted(start, prefix)
	}
	if err != nil {
		return err
	}
	var items []runtime.Object
	var last string
	remaining := int64(0)
	for _, k := range keys {
		scoped, _ := scopeKey(s.resourcePrefix, plane, k)
		if start != "" && scoped < start {
			continue
		}
		obj := view[k]
		if ok, err := pred.Matches(obj); err != nil {
			return err
		} else if !ok {
			continue
		}
		if pred.Limit > 0 && int64(len(items)) >= pred.Limit {
			remaining++
			continue
		}
		items = append(items, obj)
		last = scoped
	}
	if err := meta.SetList(listObj, items); err != nil {
		return err
	}
	listMeta, err := meta.ListAccessor(listObj)
	if err != nil {
		return err
	}
	listMeta.SetResourceVersion(rv)
	if remaining > 0 {
		parsed, err := s.Versioner().ParseResourceVersion(rv)
		if err != nil {
			return err
		}
		token, err := storage.EncodeContinue(last+"\x00", prefix, int64(parsed))
		if err != nil {
			return err
		}
		listMeta.SetContinue(token)
		listMeta.SetRemainingItemCount(&remaining)
	}
	return nil
}

// inconsistentContinue is upstream's answer (k8s.io/apiserver storage/etcd3)
// to a continue token whose revision was compacted.
const inconsistentContinue = "The provided continue parameter is too old to display a consistent list result. " +
	"You can start a new list without the continue parameter, or use the continue token in this response to " +
	"retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - " +
	"objects that were created, modified, or deleted between the time the first chunk was returned and now may " +
	"show up in the list."

// continueCompacted answers a continue token whose revision is compacted
// as upstream does: 410 with a token that continues from the same key at
// the newest revision (-1).
func continueCompacted(start, prefix string) error {
	token, err := storage.EncodeContinue(start, prefix, -1)
	if err != nil {
		return apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
	}
	expired := apierrors.NewResourceExpired(inconsistentContinue)
	expired.ErrStatus.ListMeta.Continue = token
	return expired
}

// getSingleAsList serves a list of one named object (a field selector on
// metadata.name).
func (s *Store) getSingleAsList(ctx context.Context, plane string, chain []string, key string, opts storage.ListOptions, listObj runtime.Object) error {
	_, rv, err := s.layerList(ctx, plane, key, storage.ListOptions{ResourceVersion: opts.ResourceVersion, ResourceVersionMatch: opts.ResourceVersionMatch})
	if err != nil {
		return err
	}
	obj := s.newFunc()
	err = s.getLayered(ctx, plane, chain, key, storage.GetOptions{ResourceVersion: "0", IgnoreNotFound: true}, obj)
	if err != nil {
		return err
	}
	var items []runtime.Object
	if accessor, err := meta.Accessor(obj); err == nil && accessor.GetName() != "" {
		if ok, err := opts.Predicate.Matches(obj); err != nil {
			return err
		} else if ok {
			items = append(items, obj)
		}
	}
	if err := meta.SetList(listObj, items); err != nil {
		return err
	}
	listMeta, err := meta.ListAccessor(listObj)
	if err != nil {
		return err
	}
	listMeta.SetResourceVersion(rv)
	return nil
}

func (s *Store) createLayered(ctx context.Context, plane string, chain []string, key string, obj, out runtime.Object, ttl uint64) error {
	scoped, err := scopeKey(s.resourcePrefix, plane, key)
	if err != nil {
		return err
	}
	// A name neither the plane's watch cache nor its templates hold is
	// created at once, without reading the datastore first: the datastore
	// refuses the create if a record is there after all (one the cache has
	// not seen yet, a tombstone included), and the create is then decided
	// from the datastore. Templates are read-only while used: their caches
	// are whole.
	if s.absentFromCaches(ctx, plane, chain, key) {
		err := s.Interface.Create(ctx, scoped, obj, out, ttl)
		if err == nil {
			return served(out, plane)
		}
		if !storage.IsExist(err) {
			return err
		}
	}
	return s.decide(ctx, plane, chain, key, storage.NewKeyExistsError(scoped, 0), func(own, below runtime.Object) error {
		switch {
		case own != nil && !IsTombstone(own), own == nil && below != nil:
			return storage.NewKeyExistsError(scoped, 0)
		case own == nil:
			if err := s.Interface.Create(ctx, scoped, obj, out, ttl); err != nil {
				return err
			}
			return served(out, plane)
		}
		return s.recreate(ctx, plane, scoped, obj, out)
	})
}

// absentFromCaches reports whether the watch caches of plane and of its
// templates hold nothing at key.
func (s *Store) absentFromCaches(ctx context.Context, plane string, chain []string, key string) bool {
	own, err := s.record(ctx, plane, key, storage.GetOptions{ResourceVersion: "0"})
	if err != nil || own != nil {
		return false
	}
	below, err := s.inherited(ctx, chain, key)
	return err == nil && below == nil
}

// recreate creates obj again over the plane's tombstone: the record is
// updated, and its first version says it is a creation.
func (s *Store) recreate(ctx context.Context, plane, scoped string, obj, out runtime.Object) error {
	err := s.Interface.GuaranteedUpdate(ctx, scoped, out, false, nil, func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
		if !IsTombstone(input) {
			return nil, nil, errRaced
		}
		created := obj.DeepCopyObject()
		if err := s.Versioner().PrepareObjectForStorage(created); err != nil {
			return nil, nil, err
		}
		return created, nil, setLayerState(created, LayerRecreated)
	}, nil)
	if storage.IsNotFound(err) {
		return errRaced
	}
	if err != nil {
		return err
	}
	return served(out, plane)
}

// decide calls write with what plane's own layer (own) and its templates
// (below, when own is nil) hold at key, and again while write reports that
// it raced another write of the key; exhausted answers a key that keeps
// changing.
func (s *Store) decide(ctx context.Context, plane string, chain []string, key string, exhausted error,
	write func(own, below runtime.Object) error) error {
	for range maxLayeredRetries {
		own, below, err := s.resolve(ctx, plane, chain, key, storage.GetOptions{})
		if err != nil {
			return err
		}
		if err := write(own, below); !errors.Is(err, errRaced) {
			return err
		}
	}
	return exhausted
}

// errRaced: the record changed between the read that decided how to write
// and the write; the write is decided again.
var errRaced = errors.New("the plane's record changed while it was written")

func (s *Store) updateLayered(ctx context.Context, plane string, chain []string, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc) error {
	scoped, err := scopeKey(s.resourcePrefix, plane, key)
	if err != nil {
		return err
	}
	// Most updates are of objects the plane holds a record of (every
	// status a controller writes). The watch cache tells so without a read
	// of the datastore, and the update starts from the cache's copy anyway:
	// a record it holds that is stale or gone fails the update's
	// compare-and-swap, and the update is decided again from the
	// datastore. What the cache does not hold is decided from the
	// datastore at once: a record written a moment ago may not be there
	// yet, and the object is not the template's then. So is a tombstone:
	// one a reset has removed since would answer 404 for an object the
	// template shows again. The read saved was 3 % of a busy server's CPU.
	if own, err := s.record(ctx, plane, key, storage.GetOptions{ResourceVersion: "0"}); err == nil && own != nil && !IsTombstone(own) {
		err := s.updateOwn(ctx, plane, scoped, destination, ignoreNotFound, preconditions, tryUpdate, own)
		if !errors.Is(err, errRaced) {
			return err
		}
	}
	return s.decide(ctx, plane, chain, key, storage.NewResourceVersionConflictsError(scoped, 0), func(own, below runtime.Object) error {
		if own != nil {
			return s.updateOwn(ctx, plane, scoped, destination, ignoreNotFound, preconditions, tryUpdate, own)
		}
		return s.updateInherited(ctx, plane, scoped, below, destination, ignoreNotFound, preconditions, tryUpdate)
	})
}

// updateOwn updates the plane's own record; a tombstone is what is not
// there. read is the record as just read: a storage without a watch cache
// starts from it instead of reading it again (a stale one only costs a
// failed swap and a read).
func (s *Store) updateOwn(ctx context.Context, plane, scoped string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, read runtime.Object) error {
	tombstoned := false
	err := s.Interface.GuaranteedUpdate(ctx, scoped, destination, false, nil,
		func(input runtime.Object, res storage.ResponseMeta) (runtime.Object, *uint64, error) {
			if IsTombstone(input) {
				if !ignoreNotFound {
					tombstoned = true
					return nil, nil, storage.NewKeyNotFoundError(scoped, 0)
				}
				// Created again by an update (PUT of a missing object).
				empty := s.newFunc()
				if err := preconditions.Check(scoped, empty); err != nil {
					return nil, nil, err
				}
				out, ttl, err := tryUpdate(empty, storage.ResponseMeta{})
				if err != nil {
					return nil, nil, err
				}
				return out, ttl, markWrite(out, plane, LayerRecreated)
			}
			state := layerState(input)
			if err := served(input, plane); err != nil {
				return nil, nil, err
			}
			if err := preconditions.Check(scoped, input); err != nil {
				return nil, nil, err
			}
			var before runtime.Object
			if state == LayerRecreated {
				before = input.DeepCopyObject()
			}
			out, ttl, err := tryUpdate(input, res)
			if err != nil {
				return nil, nil, err
			}
			if err := markWrite(out, plane, ""); err != nil {
				return nil, nil, err
			}
			if before != nil && equality.Semantic.DeepEqual(before, out) {
				// Nothing changed: the record stays as it is (mark
				// included), so nothing is written, as for a copy.
				return out, ttl, setLayerState(out, LayerRecreated)
			}
			return out, ttl, nil
		}, read)
	if storage.IsNotFound(err) && !tombstoned {
		// The record went away meanwhile: decide again.
		return errRaced
	}
	if err != nil {
		return err
	}
	return served(destination, plane)
}

// updateInherited makes the plane's first record of an object it
// inherited (or, with ignoreNotFound, creates it).
func (s *Store) updateInherited(ctx context.Context, plane, scoped string, below, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc) error {
	input := below
	var res storage.ResponseMeta
	if input == nil {
		if !ignoreNotFound {
			return storage.NewKeyNotFoundError(scoped, 0)
		}
		input = s.newFunc()
	} else {
		if err := served(input, plane); err != nil {
			return err
		}
		rv, err := s.Versioner().ObjectResourceVersion(input)
		if err != nil {
			return err
		}
		res.ResourceVersion = rv
	}
	if err := preconditions.Check(scoped, input); err != nil {
		return err
	}
	out, ttl, err := tryUpdate(input.DeepCopyObject(), res)
	if err != nil {
		return err
	}
	if err := markWrite(out, plane, ""); err != nil {
		return err
	}
	if below != nil && equality.Semantic.DeepEqual(input, out) {
		// Nothing changed: no record, as a copy's storage writes nothing.
		return setInto(destination, input)
	}
	if err := s.Versioner().PrepareObjectForStorage(out); err != nil {
		return err
	}
	var ttlValue uint64
	if ttl != nil {
		ttlValue = *ttl
	}
	// The plane's first record of the object: to its limits a create of
	// the whole object, which the update's own check (growth only) misses.
	release, err := s.reserveCreate(ctx, plane, scoped, out)
	if err != nil {
		return err
	}
	err = s.Interface.Create(ctx, scoped, out, destination, ttlValue)
	release(storedAt(err, destination))
	if storage.IsExist(err) {
		return errRaced
	}
	if err != nil {
		return err
	}
	return served(destination, plane)
}

// markWrite stamps an object about to be written for plane with its layer
// state, whatever a client put in either annotation.
func markWrite(obj runtime.Object, plane, state string) error {
	if err := setLayerState(obj, state); err != nil {
		return err
	}
	return stamp(obj, plane)
}

func (s *Store) deleteLayered(ctx context.Context, plane string, chain []string, key string, out runtime.Object,
	preconditions *storage.Preconditions, validateDeletion storage.ValidateObjectFunc) error {
	scoped, err := scopeKey(s.resourcePrefix, plane, key)
	if err != nil {
		return err
	}
	return s.decide(ctx, plane, chain, key, storage.NewKeyNotFoundError(scoped, 0), func(own, below runtime.Object) error {
		switch {
		case own != nil && IsTombstone(own), own == nil && below == nil:
			return storage.NewKeyNotFoundError(scoped, 0)
		case own == nil:
			return s.tombstoneInherited(ctx, plane, scoped, below, out, preconditions, validateDeletion)
		}
		inTemplate, err := s.inherited(ctx, chain, key)
		if err != nil {
			return err
		}
		return s.deleteOwn(ctx, plane, scoped, inTemplate != nil, out, preconditions, validateDeletion)
	})
}

// tombstoneInherited deletes an object the plane only inherited: a
// tombstone in its layer hides it.
func (s *Store) tombstoneInherited(ctx context.Context, plane, scoped string, below, out runtime.Object,
	preconditions *storage.Preconditions, validateDeletion storage.ValidateObjectFunc) error {
	if err := served(below, plane); err != nil {
		return err
	}
	if err := preconditions.Check(scoped, below); err != nil {
		return err
	}
	if err := validateDeletion(ctx, below); err != nil {
		return err
	}
	tomb := below.DeepCopyObject()
	if err := s.Versioner().PrepareObjectForStorage(tomb); err != nil {
		return err
	}
	if err := markWrite(tomb, plane, LayerDeleted); err != nil {
		return err
	}
	if err := s.Interface.Create(ctx, scoped, tomb, s.newFunc(), 0); err != nil {
		if storage.IsExist(err) {
			return errRaced
		}
		return err
	}
	return setInto(out, below)
}

// deleteOwn deletes the plane's own record: removed when the templates do
// not hold the key, turned into a tombstone when they do.
func (s *Store) deleteOwn(ctx context.Context, plane, scoped string, shadowsTemplate bool, out runtime.Object,
	preconditions *storage.Preconditions, validateDeletion storage.ValidateObjectFunc) error {
	if !shadowsTemplate {
		err := s.Interface.Delete(ctx, scoped, out, preconditions, func(ctx context.Context, obj runtime.Object) error {
			if IsTombstone(obj) {
				return errRaced
			}
			return validateDeletion(ctx, obj)
		}, nil, storage.DeleteOptions{})
		if err != nil {
			return err
		}
		return served(out, plane)
	}
	var last runtime.Object
	err := s.Interface.GuaranteedUpdate(ctx, scoped, s.newFunc(), false, preconditions,
		func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			if IsTombstone(input) {
				return nil, nil, storage.NewKeyNotFoundError(scoped, 0)
			}
			if err := validateDeletion(ctx, input); err != nil {
				return nil, nil, err
			}
			last = input.DeepCopyObject()
			tomb := input.DeepCopyObject()
			return tomb, nil, markWrite(tomb, plane, LayerDeleted)
		}, nil)
	if err != nil {
		return err
	}
	if err := served(last, plane); err != nil {
		return err
	}
	return setInto(out, last)
}
