package kine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"kplane.dev/kplane/datastore/driver"
)

// startBatchKine starts kine on SQLite and returns a client and a Deleter
// of it.
func startBatchKine(t *testing.T) (*clientv3.Client, *driver.Deleter) {
	t.Helper()
	k := startKine(t)
	if !k.BatchDeletes {
		t.Fatal("kine on SQLite does not take batches of deletions")
	}
	store := driver.Datastore{Endpoints: k.Endpoints, BatchDeletes: k.BatchDeletes}
	deleter, err := store.NewDeleter()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleter.Close() })
	client, err := clientv3.New(clientv3.Config{Endpoints: k.Endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client, deleter
}

func putKeys(t *testing.T, client *clientv3.Client, prefix string, n int) []driver.Deletion {
	t.Helper()
	var deletions []driver.Deletion
	for i := range n {
		key := fmt.Sprintf("%s%03d", prefix, i)
		put, err := client.Put(context.Background(), key, "v")
		if err != nil {
			t.Fatal(err)
		}
		deletions = append(deletions, driver.Deletion{Key: key, Revision: put.Header.Revision})
	}
	return deletions
}

// A batch larger than one transaction deletes every key, and a watch sees
// one DELETED event per key, each at a revision of its own, as deletions
// one by one give; a key outside the batch stays.
func TestBatchDeletesOnSQLite(t *testing.T) {
	client, deleter := startBatchKine(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Three transactions' worth.
	const n = 2*driver.MaxDeletionsPerTxn + 5
	deletions := putKeys(t, client, "/registry/configmaps/p/default/cm-", n)
	if _, err := client.Put(ctx, "/registry/configmaps/q/default/cm-000", "other plane"); err != nil {
		t.Fatal(err)
	}
	head, err := client.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	events := client.Watch(ctx, "/registry/configmaps/", clientv3.WithPrefix(), clientv3.WithRev(head.Header.Revision+1))
	revisions, deleted, err := deleter.Delete(ctx, deletions)
	if err != nil || !deleted {
		t.Fatalf("Delete = %v, %v; want true, nil", deleted, err)
	}
	if len(revisions) != n {
		t.Fatalf("%d revisions back for %d deletions", len(revisions), n)
	}
	left, err := client.Get(ctx, "/registry/configmaps/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Kvs) != 1 || string(left.Kvs[0].Key) != "/registry/configmaps/q/default/cm-000" {
		t.Fatalf("left after the batch: %v, want the other plane's key only", left.Kvs)
	}
	seen := map[string]int64{}
	var last int64
	for len(seen) < n {
		response, ok := <-events
		if !ok || response.Err() != nil {
			t.Fatalf("watch ended after %d of %d deletions: %v", len(seen), n, response.Err())
		}
		for _, e := range response.Events {
			if e.Type != mvccpb.DELETE {
				t.Fatalf("event %v of %s, want DELETE", e.Type, e.Kv.Key)
			}
			if e.Kv.ModRevision <= last {
				t.Fatalf("deletion of %s at revision %d, after one at %d: want a revision of its own", e.Kv.Key, e.Kv.ModRevision, last)
			}
			last = e.Kv.ModRevision
			seen[string(e.Kv.Key)] = e.Kv.ModRevision
		}
	}
	// Delete tells each deletion's revision, as the watch sees it.
	for i, d := range deletions {
		if seen[d.Key] != revisions[i] {
			t.Errorf("deletion of %s at revision %d, Delete said %d", d.Key, seen[d.Key], revisions[i])
		}
	}
}

// A key changed since it was read fails its whole batch: nothing of the
// batch is deleted, and the caller is told.
func TestBatchDeletesAllOrNothing(t *testing.T) {
	client, deleter := startBatchKine(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deletions := putKeys(t, client, "/registry/secrets/p/default/s-", 5)
	if _, err := client.Put(ctx, deletions[3].Key, "changed"); err != nil {
		t.Fatal(err)
	}
	revisions, deleted, err := deleter.Delete(ctx, deletions)
	if err != nil || deleted || revisions != nil {
		t.Fatalf("Delete = %v, %v, %v; want nil, false, nil", revisions, deleted, err)
	}
	left, err := client.Get(ctx, "/registry/secrets/p/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if left.Count != 5 {
		t.Fatalf("%d keys left, want all 5", left.Count)
	}
	// A key deleted already fails it too (deleted as the apiserver does).
	if del, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(deletions[0].Key), "=", deletions[0].Revision)).
		Then(clientv3.OpDelete(deletions[0].Key)).Else(clientv3.OpGet(deletions[0].Key)).Commit(); err != nil || !del.Succeeded {
		t.Fatalf("deleting %s: %v %v", deletions[0].Key, err, del)
	}
	if _, deleted, err := deleter.Delete(ctx, deletions[:1]); err != nil || deleted {
		t.Fatalf("Delete of a deleted key = %v, %v; want false, nil", deleted, err)
	}
}

// Only the batch's own shape is taken from kine: anything else (a
// fallback operation, a range, keys that differ, a revision of 0) is
// kine's to serve or refuse.
func TestBatchDeletionsShape(t *testing.T) {
	compare := func(key string, rev int64) *etcdserverpb.Compare {
		return &etcdserverpb.Compare{Key: []byte(key), Target: etcdserverpb.Compare_MOD, Result: etcdserverpb.Compare_EQUAL,
			TargetUnion: &etcdserverpb.Compare_ModRevision{ModRevision: rev}}
	}
	del := func(key, end string) *etcdserverpb.RequestOp {
		return &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestDeleteRange{
			RequestDeleteRange: &etcdserverpb.DeleteRangeRequest{Key: []byte(key), RangeEnd: []byte(end)}}}
	}
	get := &etcdserverpb.RequestOp{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: &etcdserverpb.RangeRequest{Key: []byte("/a")}}}
	for _, c := range []struct {
		name string
		txn  *etcdserverpb.TxnRequest
		want bool
	}{
		{"two deletions", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{compare("/a", 3), compare("/b", 4)},
			Success: []*etcdserverpb.RequestOp{del("/a", ""), del("/b", "")}}, true},
		{"the apiserver's deletion", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{compare("/a", 3)},
			Success: []*etcdserverpb.RequestOp{del("/a", "")}, Failure: []*etcdserverpb.RequestOp{get}}, false},
		{"a range", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{compare("/a", 3)},
			Success: []*etcdserverpb.RequestOp{del("/a", "/b")}}, false},
		{"other keys", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{compare("/a", 3)},
			Success: []*etcdserverpb.RequestOp{del("/b", "")}}, false},
		{"revision 0 (a creation's condition)", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{compare("/a", 0)},
			Success: []*etcdserverpb.RequestOp{del("/a", "")}}, false},
		{"no deletion", &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{compare("/a", 3)},
			Success: []*etcdserverpb.RequestOp{get}}, false},
		{"empty", &etcdserverpb.TxnRequest{}, false},
	} {
		if _, got := batchDeletions(c.txn); got != c.want {
			t.Errorf("%s: batchDeletions = %v, want %v", c.name, got, c.want)
		}
	}
}
