package storage

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage/etcd3"
)

// Decoding ahead: a watch cache fills from one datastore list, which
// upstream's etcd3 storage decodes item after item on one goroutine. With
// 10,000 Planes stored that list was a second of one core's time at every
// start (custom resources decode through JSON and schema coercion), with
// the server's other cores idle and readiness waiting on it. While a
// cache's list is read (cacheSource.GetList), every datastore page of
// at least minDecodeAhead records (aheadLister) is also decoded by helper
// goroutines, from its last record backwards, and the storage's own
// decoder (aheadDecoder) takes the helpers' result for a record they
// reached first: the same decoder, the same bytes, the same revision, so
// the same object or error. Lists served to clients are not touched.

// minDecodeAhead is the smallest page decoded ahead: below it, the
// helpers' start and hand-over cost more than the decoding they share.
const minDecodeAhead = 128

// aheadScope is one cache list's pages, looked up by their records'
// bytes; it ends with the list, and what it decoded but nobody took goes
// with it.
type aheadScope struct {
	mu      sync.Mutex
	records map[*byte]*aheadRecord
	ended   bool
}

// aheadPage is one datastore page of a scope, decoded from both ends.
type aheadPage struct {
	scope   *aheadScope
	records []*aheadRecord
	started sync.Once
}

// aheadRecord is one record of a page: whoever claims it decodes it.
type aheadRecord struct {
	page    *aheadPage
	data    []byte
	rev     uint64
	claimed atomic.Bool
	done    chan struct{}
	obj     apiruntime.Object
	err     error
}

type aheadScopeKey struct{}

// withDecodeAhead returns ctx with a new scope and the function ending it.
func withDecodeAhead(ctx context.Context) (context.Context, func()) {
	s := &aheadScope{records: map[*byte]*aheadRecord{}}
	return context.WithValue(ctx, aheadScopeKey{}, s), s.end
}

func aheadScopeOf(ctx context.Context) *aheadScope {
	s, _ := ctx.Value(aheadScopeKey{}).(*aheadScope)
	return s
}

// expect registers a page the storage is about to decode.
func (s *aheadScope) expect(kvs []*mvccpb.KeyValue) {
	if len(kvs) < minDecodeAhead || runtime.GOMAXPROCS(0) < 2 {
		return
	}
	p := &aheadPage{scope: s, records: make([]*aheadRecord, 0, len(kvs))}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	for _, kv := range kvs {
		if len(kv.Value) == 0 {
			continue
		}
		key := &kv.Value[0]
		if _, seen := s.records[key]; seen {
			// Two records on the same bytes: neither is told apart by
			// its bytes, so both are decoded where they are read.
			s.records[key] = nil
			continue
		}
		r := &aheadRecord{page: p, data: kv.Value, rev: uint64(kv.ModRevision), done: make(chan struct{})}
		s.records[key] = r
		p.records = append(p.records, r)
	}
}

// take removes and returns the record read from data at rev, if the scope
// expected it.
func (s *aheadScope) take(data []byte, rev uint64) *aheadRecord {
	if len(data) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[&data[0]]
	if r == nil || len(r.data) != len(data) || r.rev != rev {
		return nil
	}
	delete(s.records, &data[0])
	return r
}

// end stops the helpers and drops what was not taken.
func (s *aheadScope) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	s.records = nil
}

func (s *aheadScope) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// start sets the page's helpers to work, once: they need the list's item
// constructor, which only the first decode brings.
func (p *aheadPage) start(ctx context.Context, decoder etcd3.Decoder, newItem func() apiruntime.Object) {
	p.started.Do(func() {
		for range runtime.GOMAXPROCS(0) - 1 {
			go p.help(ctx, decoder, newItem)
		}
	})
}

// help decodes the page's records from the last one backwards until it
// meets records already claimed, or the list ends.
func (p *aheadPage) help(ctx context.Context, decoder etcd3.Decoder, newItem func() apiruntime.Object) {
	for i := len(p.records) - 1; i >= 0; i-- {
		if ctx.Err() != nil || p.scope.isEnded() {
			return
		}
		r := p.records[i]
		if !r.claimed.CompareAndSwap(false, true) {
			// The list's own decoding got here: the rest is behind it.
			return
		}
		r.obj, r.err = decoder.DecodeListItem(ctx, r.data, r.rev, newItem)
		close(r.done)
	}
}

// aheadLister registers the pages a cache list reads from the datastore.
type aheadLister struct {
	etcdkubernetes.Interface
}

func (l aheadLister) List(ctx context.Context, prefix string, opts etcdkubernetes.ListOptions) (etcdkubernetes.ListResponse, error) {
	resp, err := l.Interface.List(ctx, prefix, opts)
	if s := aheadScopeOf(ctx); s != nil && err == nil {
		s.expect(resp.Kvs)
	}
	return resp, err
}

// aheadDecoder is a storage's decoder that takes a record's object from
// the helpers when they decoded it first.
type aheadDecoder struct {
	etcd3.Decoder
}

func (d aheadDecoder) DecodeListItem(ctx context.Context, data []byte, rev uint64, newItem func() apiruntime.Object) (apiruntime.Object, error) {
	s := aheadScopeOf(ctx)
	if s == nil {
		return d.Decoder.DecodeListItem(ctx, data, rev, newItem)
	}
	r := s.take(data, rev)
	if r == nil {
		return d.Decoder.DecodeListItem(ctx, data, rev, newItem)
	}
	r.page.start(ctx, d.Decoder, newItem)
	if r.claimed.CompareAndSwap(false, true) {
		return d.Decoder.DecodeListItem(ctx, data, rev, newItem)
	}
	// A helper that claimed the record always finishes it.
	<-r.done
	return r.obj, r.err
}
