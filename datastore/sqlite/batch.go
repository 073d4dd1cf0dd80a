//go:build !cgo

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/k3s-io/kine/pkg/drivers/generic"
	"github.com/k3s-io/kine/pkg/server"
)

// batchBackend is kine's backend with deletions of many records in one
// SQLite transaction. A reset deletes every record its plane wrote: one
// at a time, each was a transaction of its own behind the write gate
// (about 0.3 ms, most of it the commit), and twenty of them were most of
// a reset.
type batchBackend struct {
	server.Backend
	dialect *generic.Generic
}

var _ BatchDeleter = batchBackend{}

// DeleteBatch implements BatchDeleter. Each deletion is the row kine's own
// deletion inserts, under the same condition (the key's newest row is
// still at the revision), so a watch sees one DELETED event per record,
// each at a revision of its own, as if they had been deleted one by one.
func (b batchBackend) DeleteBatch(ctx context.Context, deletions []Deletion) ([]int64, bool, error) {
	if len(deletions) == 0 {
		return nil, true, nil
	}
	tx, err := b.dialect.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, false, fmt.Errorf("beginning a batch of %d deletions: %w", len(deletions), err)
	}
	revisions := make([]int64, len(deletions))
	for i, d := range deletions {
		revisions[i], err = tx.Insert(ctx, d.Key, false, true, d.Revision, 0, nil)
		if err != nil || revisions[i] == 0 {
			// Revision 0: the key is no longer at d.Revision.
			if rollbackErr := tx.Rollback(); rollbackErr != nil {
				err = errors.Join(err, rollbackErr)
			}
			if err != nil {
				return nil, false, fmt.Errorf("deleting %s in a batch: %w", d.Key, err)
			}
			return nil, false, nil
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, false, fmt.Errorf("committing a batch of %d deletions: %w", len(deletions), err)
	}
	b.wakeWatches(ctx, deletions[0].Key)
	return revisions, true, nil
}

// wakeWatches makes kine's log read the rows just committed now rather
// than at its next poll (a second away): kine wakes it on its own writes
// and reads, and a read of the newest revision of one key is the
// cheapest of those. Its error is of no consequence: the poll comes.
func (b batchBackend) wakeWatches(ctx context.Context, key string) {
	_, _, _ = b.Backend.List(ctx, key, "", 1, 0, true)
}
