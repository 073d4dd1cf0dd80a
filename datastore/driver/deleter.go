package driver

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Deletion is one record to delete if its newest revision is still
// Revision.
type Deletion struct {
	Key      string
	Revision int64
}

// Deleter deletes many records of a datastore that takes batches of
// deletions (Datastore.BatchDeletes).
type Deleter struct {
	client *clientv3.Client
}

// NewDeleter returns the datastore's Deleter, or nil when it deletes one
// record per transaction. The caller closes it.
func (d *Datastore) NewDeleter() (*Deleter, error) {
	if !d.BatchDeletes {
		return nil, nil
	}
	if d.InProcess != nil {
		return &Deleter{client: d.InProcess.NewClient()}, nil
	}
	client, err := d.Client()
	if err != nil {
		return nil, err
	}
	return &Deleter{client: client}, nil
}

// MaxDeletionsPerTxn bounds a batch: SQLite takes one writer at a time,
// and a batch holds the write lock for all its rows (about 0.15 ms each),
// so that other planes' writes wait for at most this many.
const MaxDeletionsPerTxn = 32

// Delete deletes every record, MaxDeletionsPerTxn at a time, each batch
// all or nothing, and returns the revision of each deletion. It returns
// false when a record had changed since it was read: that batch and the
// ones after it are not deleted, and the caller deletes what is left one
// by one, as it would have without a Deleter.
func (d *Deleter) Delete(ctx context.Context, deletions []Deletion) ([]int64, bool, error) {
	revisions := make([]int64, 0, len(deletions))
	for len(deletions) > 0 {
		n := min(len(deletions), MaxDeletionsPerTxn)
		compares := make([]clientv3.Cmp, n)
		ops := make([]clientv3.Op, n)
		for i, deletion := range deletions[:n] {
			compares[i] = clientv3.Compare(clientv3.ModRevision(deletion.Key), "=", deletion.Revision)
			ops[i] = clientv3.OpDelete(deletion.Key)
		}
		response, err := d.client.Txn(ctx).If(compares...).Then(ops...).Commit()
		if err != nil {
			return nil, false, fmt.Errorf("deleting %d records in one transaction: %w", n, err)
		}
		if !response.Succeeded {
			return nil, false, nil
		}
		if len(response.Responses) != n {
			return nil, false, fmt.Errorf("deleting %d records in one transaction: %d answers", n, len(response.Responses))
		}
		for _, r := range response.Responses {
			revisions = append(revisions, r.GetResponseDeleteRange().GetHeader().GetRevision())
		}
		deletions = deletions[n:]
	}
	return revisions, true, nil
}

// Close closes the Deleter's connection to the datastore.
func (d *Deleter) Close() error { return d.client.Close() }
