package kine

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A key created again after its deletion is answered the revision its
// record has, while other keys are written at the same time (kine alone
// answers its current revision then, often another write's).
func TestCreatedAgainAnswersItsRevision(t *testing.T) {
	client, _ := startBatchKine(t) // kine on SQLite
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const writers, rounds = 8, 40
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			errs <- createAgainAndCompare(ctx, client, fmt.Sprintf("/again/%d", w), rounds)
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// createAgainAndCompare creates key, deletes it and creates it again,
// rounds times, as the apiserver creates (a put if the key has no
// revision), and compares each create's answer with the record.
func createAgainAndCompare(ctx context.Context, client *clientv3.Client, key string, rounds int) error {
	for round := range rounds {
		resp, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, fmt.Sprint(round))).Commit()
		if err != nil || !resp.Succeeded {
			return fmt.Errorf("round %d: creating %s: %v, succeeded %v", round, key, err, resp != nil && resp.Succeeded)
		}
		got, err := client.Get(ctx, key)
		if err != nil || len(got.Kvs) != 1 {
			return fmt.Errorf("round %d: reading %s: %v", round, key, err)
		}
		if stored := got.Kvs[0].ModRevision; stored != resp.Header.Revision {
			return fmt.Errorf("round %d: %s created at revision %d, answered %d", round, key, stored, resp.Header.Revision)
		}
		// As the apiserver deletes: at the revision it read.
		del, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", got.Kvs[0].ModRevision)).
			Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
		if err != nil || !del.Succeeded {
			return fmt.Errorf("round %d: deleting %s: %v, succeeded %v", round, key, err, del != nil && del.Succeeded)
		}
	}
	return nil
}
