package kine

import (
	"context"

	"github.com/k3s-io/kine/pkg/server"
)

// answeredCreates is a kine backend whose creates answer the revision of
// the record they wrote. For a key created again after its deletion,
// kine's LogStructured.Create (v0.17.5) inserts a second time and answers
// a shadowed variable: its current revision, which under concurrent
// writes is another write's, higher or lower (49 creates of 1,679 while
// six members were reset next to each other). The client was handed a
// resourceVersion its object never had, so an update sent with it was
// refused, and a server alone on SQLite, whose consistent reads come from
// the watch cache at the newest revision it acknowledged, waited for that
// revision instead of the object's: a reset listing a member's records
// missed one just written. Updates and deletions answer their own row.
type answeredCreates struct {
	server.Backend
}

// Create implements server.Backend: the key's newest record names the
// create it belongs to.
func (b answeredCreates) Create(ctx context.Context, key string, value []byte, lease int64) (int64, error) {
	rev, err := b.Backend.Create(ctx, key, value, lease)
	if err != nil {
		return rev, err
	}
	_, kv, err := b.Backend.Get(ctx, key, 0, true)
	if err != nil || kv == nil || kv.CreateRevision == 0 {
		// Deleted again meanwhile: no record names this create any more.
		return rev, nil
	}
	return kv.CreateRevision, nil
}
