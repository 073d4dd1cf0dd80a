package sqlite

import "context"

// Deletion is one record to delete if it is still at Revision, its
// newest.
type Deletion struct {
	Key      string
	Revision int64
}

// BatchDeleter is a kine backend that deletes many records in one
// transaction.
type BatchDeleter interface {
	// DeleteBatch deletes every record, all or none: deleted is false,
	// and nothing is deleted, when one of them is no longer at its
	// revision. revisions are the revisions of the deletions, in order.
	DeleteBatch(ctx context.Context, deletions []Deletion) (revisions []int64, deleted bool, err error)
}
