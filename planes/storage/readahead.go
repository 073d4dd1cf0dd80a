package storage

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"
)

// Reading ahead: at a restart with many planes stored, readiness waits on
// the Planes' watch cache, the last to fill: its list reads every Plane
// from the datastore (0.25-0.35 s for 10,000 through the pure-Go SQLite),
// then decodes them. Meanwhile, earlier, the server's configuration and
// its APIs are built on one core while the other has nothing to do. A
// prefix read ahead is read from the in-process datastore then, and the
// first list of a watch cache under that prefix takes its pages from that
// read: the same records at the read's revision, from which the cache
// then watches, as if its list had come that much earlier. Only that
// first list uses it (a cache's later lists, and every client's, go to
// the datastore), and the records go once it took the last page, or
// after readAheadKept.

// readAheadKept is how long a read waits for its cache's list before it
// is dropped (a prefix no cache lists, or a cache built late); a list
// still taking pages then reads the rest from the datastore, at the same
// revision.
const readAheadKept = time.Minute

// readAheads are the prefixes read ahead of their caches' lists.
type readAheads struct {
	mu    sync.Mutex
	reads map[string]*readAhead
}

// readAhead is one prefix's read. Its first page goes to the first cache
// list that asks for the prefix at the newest revision; the list's next
// pages follow at the read's revision.
type readAhead struct {
	done chan struct{}
	// kvs, rev and err are set before done is closed, and kvs is
	// dropped with the read (all under readAheads.mu).
	kvs []*mvccpb.KeyValue
	rev int64
	err error
	// serving is set once a list took the first page (readAheads.mu).
	serving bool
}

// start reads every record under prefix through a client from newClient,
// in the background; ctx bounds the read.
func (r *readAheads) start(ctx context.Context, newClient func() *clientv3.Client, prefix string) {
	read := &readAhead{done: make(chan struct{})}
	r.mu.Lock()
	if r.reads == nil {
		r.reads = map[string]*readAhead{}
	}
	if _, ok := r.reads[prefix]; ok {
		r.mu.Unlock()
		return
	}
	r.reads[prefix] = read
	r.mu.Unlock()
	go func() {
		defer close(read.done)
		kvs, rev, err := readPrefix(ctx, newClient(), prefix)
		r.mu.Lock()
		defer r.mu.Unlock()
		read.err = err
		if r.reads[prefix] == read {
			// A read dropped meanwhile keeps nothing.
			read.kvs, read.rev = kvs, rev
		}
	}()
	time.AfterFunc(readAheadKept, func() { r.drop(prefix, read) })
}

// readPrefix reads every record under prefix through client, which it
// closes, in key order.
func readPrefix(ctx context.Context, client *clientv3.Client, prefix string) ([]*mvccpb.KeyValue, int64, error) {
	defer client.Close()
	resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	// A datastore answers a range in key order; the pages are cut by key,
	// so make sure of it.
	slices.SortFunc(resp.Kvs, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	return resp.Kvs, resp.Header.Revision, nil
}

// page answers a cache list's read of prefix from a read ahead, if there
// is one for this read: the first page at the newest revision, or a next
// page at the read's revision. ok is false when the datastore must answer.
func (r *readAheads) page(ctx context.Context, prefix string, opts etcdkubernetes.ListOptions) (resp etcdkubernetes.ListResponse, ok bool) {
	if r == nil {
		return resp, false
	}
	read, first := r.claim(prefix, opts)
	if read == nil {
		return resp, false
	}
	select {
	case <-read.done:
	case <-ctx.Done():
		r.drop(prefix, read)
		return resp, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reads[prefix] != read || read.err != nil || (!first && opts.Revision != read.rev) {
		r.dropLocked(prefix, read)
		return resp, false
	}
	start := prefix
	if opts.Continue != "" {
		start = opts.Continue
	}
	from, _ := slices.BinarySearchFunc(read.kvs, start, func(kv *mvccpb.KeyValue, key string) int { return strings.Compare(string(kv.Key), key) })
	rest := read.kvs[from:]
	n := len(rest)
	if opts.Limit > 0 && int(opts.Limit) < n {
		n = int(opts.Limit)
	}
	// A copy: the storage clears the page's entries as it decodes them.
	resp = etcdkubernetes.ListResponse{Kvs: slices.Clone(rest[:n]), Count: int64(len(rest)), Revision: read.rev}
	if n == len(rest) {
		r.dropLocked(prefix, read)
	}
	return resp, true
}

// claim returns the read that answers this list read of prefix, if any,
// and whether it is the list's first page.
func (r *readAheads) claim(prefix string, opts etcdkubernetes.ListOptions) (read *readAhead, first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	read = r.reads[prefix]
	switch {
	case read == nil:
		return nil, false
	case !read.serving && opts.Revision == 0 && opts.Continue == "":
		read.serving = true
		return read, true
	case read.serving && opts.Continue != "":
		return read, false
	}
	return nil, false
}

// drop forgets read, the prefix's read ahead, if it still is.
func (r *readAheads) drop(prefix string, read *readAhead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropLocked(prefix, read)
}

func (r *readAheads) dropLocked(prefix string, read *readAhead) {
	if r.reads[prefix] == read {
		delete(r.reads, prefix)
		read.kvs = nil
	}
}
