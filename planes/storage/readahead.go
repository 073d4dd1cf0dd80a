package storage

import (
	"context"
	"sort"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"
)

// Reading ahead: at a restart with many planes stored, readiness waits on
// the Planes' watch cache, the last to fill: its list reads every Plane
// from the datastore (0.25-0.35 s for 10,000 through the pure-Go SQLite),
// then decodes them. Meanwhile, earlier, upstream builds the server's
// configuration on one core (two RSA keys for its loopback certificate:
// about 0.3 s) while the other has nothing to do. A prefix read ahead is
// read from the in-process datastore then, and the first list of a watch
// cache under that prefix takes its pages from that read: the same
// records at the read's revision, from which the cache then watches, as
// if its list had come that much earlier. Only that first list uses it
// (a cache's later lists, and every client's, go to the datastore), and
// the records go once it reached the last page.

// readAheadUnclaimed is how long a read waits for its cache's list before
// it is dropped (a prefix no cache lists, or a cache built late).
const readAheadUnclaimed = time.Minute

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
	kvs  []*mvccpb.KeyValue
	rev  int64
	err  error
	// serving is set once a list took the first page.
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
		client := newClient()
		defer client.Close()
		resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			read.err = err
			return
		}
		// A datastore answers a range in key order; the pages are cut by
		// key, so make sure of it.
		read.kvs = resp.Kvs
		sort.Slice(read.kvs, func(i, j int) bool { return string(read.kvs[i].Key) < string(read.kvs[j].Key) })
		read.rev = resp.Header.Revision
	}()
	time.AfterFunc(readAheadUnclaimed, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.reads[prefix] == read && !read.serving {
			delete(r.reads, prefix)
		}
	})
}

// page answers a cache list's read of prefix from a read ahead, if there
// is one for this read: the first page at the newest revision, or a next
// page at the read's revision. ok is false when the datastore must answer.
func (r *readAheads) page(ctx context.Context, prefix string, opts etcdkubernetes.ListOptions) (resp etcdkubernetes.ListResponse, ok bool) {
	if r == nil {
		return resp, false
	}
	r.mu.Lock()
	read := r.reads[prefix]
	switch {
	case read == nil:
	case !read.serving && opts.Revision == 0 && opts.Continue == "":
		read.serving = true
		ok = true
	case read.serving && opts.Continue != "":
		select {
		case <-read.done:
			ok = read.err == nil && opts.Revision == read.rev
		default:
		}
	}
	r.mu.Unlock()
	if !ok {
		return resp, false
	}
	select {
	case <-read.done:
	case <-ctx.Done():
		r.drop(prefix, read)
		return resp, false
	}
	if read.err != nil {
		r.drop(prefix, read)
		return resp, false
	}
	start := prefix
	if opts.Continue != "" {
		start = opts.Continue
	}
	rest := read.kvs[sort.Search(len(read.kvs), func(i int) bool { return string(read.kvs[i].Key) >= start }):]
	n := len(rest)
	if opts.Limit > 0 && int(opts.Limit) < n {
		n = int(opts.Limit)
	}
	if n == len(rest) {
		r.drop(prefix, read)
	}
	// A copy: the storage clears the page's entries as it decodes them.
	return etcdkubernetes.ListResponse{Kvs: append([]*mvccpb.KeyValue(nil), rest[:n]...), Count: int64(len(rest)), Revision: read.rev}, true
}

// drop forgets read, the prefix's read ahead, if it still is.
func (r *readAheads) drop(prefix string, read *readAhead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reads[prefix] == read {
		delete(r.reads, prefix)
	}
}
