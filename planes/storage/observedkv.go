package storage

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// observedRevisions are, per datastore key prefix of a cached storage, the
// newest revision of a record under it that the datastore showed this
// process: read back, written, or found changed by a write that lost a
// race. A consistent read from the watch cache (freshreads.go) waits for
// it, so that a client never reads older than what any answer told it:
// a write that lost to another one, then reads again to decide what to do
// (a garbage collector's deletion pinned to a version), reads what beat
// it, even while the winner's own answer is still on its way.
type observedRevisions struct {
	mu sync.RWMutex
	// under maps a storage's key prefix ("/registry/configmaps/") to the
	// revisions of the storages under it (a CRD's served versions share
	// one prefix).
	under map[string][]*atomic.Uint64
	// longest is the length of the longest prefix in under.
	longest int
}

// add makes rev follow the records under prefix.
func (o *observedRevisions) add(prefix string, rev *atomic.Uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.under == nil {
		o.under = map[string][]*atomic.Uint64{}
	}
	o.under[prefix] = append(o.under[prefix], rev)
	o.longest = max(o.longest, len(prefix))
}

// remove stops rev following the records under prefix.
func (o *observedRevisions) remove(prefix string, rev *atomic.Uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	revs := o.under[prefix]
	for i, r := range revs {
		if r == rev {
			o.under[prefix] = append(revs[:i:i], revs[i+1:]...)
			break
		}
	}
	if len(o.under[prefix]) == 0 {
		delete(o.under, prefix)
	}
}

// saw raises the revisions following key to rev.
func (o *observedRevisions) saw(key []byte, rev int64) {
	if rev <= 0 {
		return
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	if len(o.under) == 0 {
		return
	}
	// A storage's prefix ends at a slash: its resource's
	// ("/registry/pods/") or its group's and resource's
	// ("/registry/apps/deployments/"). Every shorter prefix of key that
	// ends at a slash is looked up; there are few.
	for end := 1; end < len(key); end++ {
		if key[end] != '/' {
			continue
		}
		// Looked up without converting key (Go does not allocate for a
		// map index by string(bytes)).
		for _, r := range o.under[string(key[:end+1])] {
			raiseUint(r, uint64(rev))
		}
		if end+1 >= o.longest {
			return
		}
	}
}

// raiseUint raises newest to n.
func raiseUint(newest *atomic.Uint64, n uint64) {
	for {
		old := newest.Load()
		if n <= old || newest.CompareAndSwap(old, n) {
			return
		}
	}
}

// observingKV is the datastore's KV, telling observedRevisions of every
// record an answer shows.
type observingKV struct {
	clientv3.KV
	observed *observedRevisions
}

func (o observingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := o.KV.Get(ctx, key, opts...)
	if err == nil {
		o.observed.sawRecords(resp.Kvs)
	}
	return resp, err
}

func (o observingKV) Txn(ctx context.Context) clientv3.Txn {
	return &observingTxn{Txn: o.KV.Txn(ctx), observed: o.observed}
}

// sawRecords raises the revisions following each record's key to the
// record's.
func (o *observedRevisions) sawRecords(kvs []*mvccpb.KeyValue) {
	for _, kv := range kvs {
		o.saw(kv.Key, kv.ModRevision)
	}
}

// observingTxn remembers the keys its operations write, to tell of them
// at the revision the transaction answers.
type observingTxn struct {
	clientv3.Txn
	observed    *observedRevisions
	then, elses []clientv3.Op
}

func (t *observingTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *observingTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.then = append(t.then, ops...)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *observingTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.elses = append(t.elses, ops...)
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *observingTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err != nil || resp == nil {
		return resp, err
	}
	ops := t.then
	if !resp.Succeeded {
		ops = t.elses
	}
	for _, op := range ops {
		if op.IsPut() || op.IsDelete() {
			t.observed.saw(op.KeyBytes(), resp.Header.GetRevision())
		}
	}
	for _, r := range resp.Responses {
		if rr := r.GetResponseRange(); rr != nil {
			t.observed.sawRecords(rr.Kvs)
		}
	}
	return resp, nil
}

// recordsPrefix is the datastore key prefix of a storage's records
// ("/registry/" and "/configmaps": "/registry/configmaps/").
func recordsPrefix(keyPrefix, resourcePrefix string) string {
	return keyPrefix + strings.Trim(resourcePrefix, "/") + "/"
}
