package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
)

// listed is one resource of a snapshot, read from its cache.
type listed struct {
	*target
	synced bool
	// rv is the revision the cache was at when it was read.
	rv    uint64
	items []runtime.Object
}

func (s *Server) serveSnapshot(w http.ResponseWriter, req *http.Request, plane string, targets []*target, opts Options) {
	ctx := req.Context()
	if opts.Warm {
		s.warm(ctx, plane, targets)
	}
	taken := time.Now().UTC()
	resources := make([]listed, 0, len(targets))
	for _, t := range targets {
		l, err := read(ctx, t, opts)
		if err != nil && t.custom {
			// Its CRD is going away while being read: not known, not fatal.
			l, err = listed{target: t}, nil
		}
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		resources = append(resources, l)
	}
	s.catchUp(ctx, resources, opts)
	if rv, ok := resumeVersion(resources); ok {
		// Taps started soon after reach back to it.
		s.taps.handedOut.record(rv, taken)
	}
	defer s.encodings.sweep(taken)
	buf := getBuffer()
	defer putBuffer(buf)
	if err := writeSnapshot(buf, s.encodings, plane, taken, resources, opts.IncludeEmpty); err != nil {
		s.writeError(w, req, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

// catchUp makes the snapshot's resourceVersion one every cache can resume
// a watch from. A cache built after the server started cannot go back
// before it was built, nor can a delta stream start before its resource's
// tap did (one started by another stream while this snapshot was read,
// before its revision counted as handed out); when a quieter cache lags
// behind that point, it is read again once it has caught up (the cache
// waits for that, briefly), and is otherwise left as it is: a delta
// stream from the snapshot is then refused with 410 and the client takes
// a new snapshot.
func (s *Server) catchUp(ctx context.Context, resources []listed, opts Options) {
	var need uint64
	for _, l := range resources {
		if l.synced {
			need = max(need, s.floor(l.store, l.rv), s.taps.startedAt(l.store))
		}
	}
	for i, l := range resources {
		if !l.synced || l.rv >= need {
			continue
		}
		fresh, err := readAt(ctx, l.target, opts, strconv.FormatUint(need, 10))
		if err != nil || !fresh.synced {
			return
		}
		resources[i] = fresh
	}
}

// read lists the plane's objects of t from its watch cache. A resource
// whose cache is not synced is reported as such and never read: an
// unsynced cache would send the read to the datastore.
func read(ctx context.Context, t *target, opts Options) (listed, error) {
	return readAt(ctx, t, opts, "0")
}

// readAt is read at a revision the cache must have reached ("0": any).
func readAt(ctx context.Context, t *target, opts Options, rv string) (listed, error) {
	l := listed{target: t}
	if !synced(t.store) {
		return l, nil
	}
	key := t.store.ResourcePrefix()
	if opts.Namespace != "" {
		key += "/" + opts.Namespace
	}
	pred := storage.Everything
	if !opts.LabelSelector.Empty() {
		pred = storage.SelectionPredicate{Label: opts.LabelSelector, Field: fields.Everything(), GetAttrs: storage.DefaultClusterScopedAttr}
	}
	list := t.store.NewList()
	listOpts := storage.ListOptions{ResourceVersion: rv, Recursive: true, Predicate: pred}
	if rv != "0" {
		listOpts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	err := t.store.GetList(ctx, key, listOpts, list)
	if apierrors.IsTooManyRequests(err) {
		// The cache went unready since synced() looked.
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("reading %s from its cache: %w", t.name(), err)
	}
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return l, err
	}
	if l.rv, err = strconv.ParseUint(listMeta.GetResourceVersion(), 10, 64); err != nil {
		return l, fmt.Errorf("%s: cache resourceVersion %q: %w", t.name(), listMeta.GetResourceVersion(), err)
	}
	if err := meta.EachListItem(list, func(obj runtime.Object) error {
		l.items = append(l.items, obj)
		return nil
	}); err != nil {
		return l, err
	}
	l.synced = true
	return l, nil
}

// resumeVersion is the revision a delta stream of these resources resumes
// from: the oldest of their caches' revisions. Every cache is at least that
// fresh, so no change after it is missing from the snapshot; changes
// between it and a fresher cache's revision are already in the snapshot
// and come again in the stream, which a client applies as upserts and
// deletes by identity, to the same result.
func resumeVersion(resources []listed) (uint64, bool) {
	var rv uint64 = math.MaxUint64
	for _, r := range resources {
		if r.synced && r.rv < rv {
			rv = r.rv
		}
	}
	return rv, rv != math.MaxUint64
}

// writeSnapshot writes the response. It is written by hand around the
// items, which are encoded straight into buf: going through
// json.RawMessage would scan every item a second time.
func writeSnapshot(buf *bytes.Buffer, kept *encodings, plane string, taken time.Time, resources []listed, includeEmpty bool) error {
	head := Snapshot{Cluster: plane, SnapshotTime: taken.Format(time.RFC3339Nano)}
	if rv, ok := resumeVersion(resources); ok {
		head.ResourceVersion = strconv.FormatUint(rv, 10)
	}
	for _, r := range resources {
		if r.synced {
			head.LiveResources++
		}
	}
	if err := writeJSON(buf, head); err != nil {
		return err
	}
	// head ends with "resources":null}
	buf.Truncate(buf.Len() - len(`null}`))
	buf.WriteByte('[')
	first := true
	for _, r := range resources {
		if r.synced && len(r.items) == 0 && !includeEmpty {
			continue
		}
		if !first {
			buf.WriteByte(',')
		}
		first = false
		if err := writeResource(buf, kept, taken, r); err != nil {
			return err
		}
	}
	buf.WriteString("]}")
	return nil
}

func writeResource(buf *bytes.Buffer, kept *encodings, now time.Time, r listed) error {
	head := Resource{
		Group: r.gvr.Group, Version: r.gvr.Version, Resource: r.gvr.Resource, Kind: r.kind,
		Namespaced: r.namespaced, Synced: r.synced, ItemCount: len(r.items),
	}
	if r.synced {
		head.ResourceVersion = strconv.FormatUint(r.rv, 10)
	}
	if err := writeJSON(buf, head); err != nil {
		return err
	}
	// head ends with "items":null}
	buf.Truncate(buf.Len() - len(`null}`))
	buf.WriteByte('[')
	for i, obj := range r.items {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := kept.encode(buf, r.enc, obj, now); err != nil {
			return fmt.Errorf("encoding %s: %w", r.name(), err)
		}
	}
	buf.WriteString("]}")
	return nil
}

var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuffer() *bytes.Buffer {
	buf := buffers.Get().(*bytes.Buffer)
	buf.Reset()
	return buf
}

// putBuffer keeps buffers of ordinary snapshots for reuse; a huge one is
// left to the garbage collector rather than held.
func putBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 8<<20 {
		buffers.Put(buf)
	}
}
