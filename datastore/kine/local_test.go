package kine

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// startKine starts kine on SQLite in a temporary directory.
func startKine(t *testing.T) *Kine {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	k, err := listen(ctx, Config{Endpoint: SQLiteEndpoint(filepath.Join(dir, "db", "state.db")), SocketDir: dir}, grpcServer())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.StopServing()
		cancel()
		k.Wait()
	})
	return k
}

// The in-process client and a client over the socket see one datastore:
// what one writes the other reads, and a watch of either sees the writes
// of both, in order.
func TestInProcessClientSharesTheDatastore(t *testing.T) {
	k := startKine(t)
	local := k.InProcess.NewClient()
	defer local.Close()
	remote, err := clientv3.New(clientv3.Config{Endpoints: k.Endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	watch := local.Watch(ctx, "/registry/a/", clientv3.WithPrefix())
	first, err := remote.Put(ctx, "/registry/a/one", "1")
	if err != nil {
		t.Fatal(err)
	}
	// The apiserver creates with a transaction on the key's mod revision.
	created, err := local.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision("/registry/a/two"), "=", 0)).
		Then(clientv3.OpPut("/registry/a/two", "2")).Commit()
	if err != nil || !created.Succeeded {
		t.Fatalf("create through the in-process client: %v, succeeded %v", err, created != nil && created.Succeeded)
	}
	if created.Header.Revision <= first.Header.Revision {
		t.Fatalf("revision %d after %d", created.Header.Revision, first.Header.Revision)
	}
	got, err := remote.Get(ctx, "/registry/a/two")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "2" {
		t.Fatalf("the socket's client reads %v, %v", got, err)
	}
	got, err = local.Get(ctx, "/registry/a/", clientv3.WithPrefix())
	if err != nil || len(got.Kvs) != 2 {
		t.Fatalf("the in-process client lists %v, %v", got, err)
	}

	var keys []string
	for len(keys) < 2 {
		select {
		case resp, ok := <-watch:
			if !ok || resp.Err() != nil {
				t.Fatalf("watch ended: %v", resp.Err())
			}
			for _, ev := range resp.Events {
				keys = append(keys, string(ev.Kv.Key))
			}
		case <-ctx.Done():
			t.Fatalf("watch saw %v", keys)
		}
	}
	if strings.Join(keys, ",") != "/registry/a/one,/registry/a/two" {
		t.Fatalf("watch saw %v", keys)
	}
}

// A write too large for kine's gRPC server is refused the same way when it
// comes from the in-process client, and nothing is stored.
func TestInProcessClientRefusesWhatGRPCRefuses(t *testing.T) {
	k := startKine(t)
	local := k.InProcess.NewClient()
	defer local.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	huge := strings.Repeat("x", maxRequestBytes+1)
	_, err := local.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision("/registry/huge"), "=", 0)).
		Then(clientv3.OpPut("/registry/huge", huge)).Commit()
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a %d-byte write: %v, want ResourceExhausted", len(huge), err)
	}
	got, err := local.Get(ctx, "/registry/huge")
	if err != nil || len(got.Kvs) != 0 {
		t.Fatalf("after the refusal: %v, %v", got, err)
	}
}

// Closing an in-process client ends its watches: kine answers each with
// its cancellation before the stream ends (streamWatches), and the
// channel closes.
func TestInProcessClientCloseEndsWatches(t *testing.T) {
	k := startKine(t)
	local := k.InProcess.NewClient()
	watches := make([]clientv3.WatchChan, 5)
	for i := range watches {
		watches[i] = local.Watch(context.Background(), "/registry/w/", clientv3.WithPrefix())
	}
	if _, err := local.Put(context.Background(), "/registry/w/x", "1"); err != nil {
		t.Fatal(err)
	}
	for _, w := range watches {
		if resp := <-w; len(resp.Events) != 1 {
			t.Fatalf("watch saw %v", resp)
		}
	}
	local.Close()
	deadline := time.After(10 * time.Second)
	for i, w := range watches {
		for open := true; open; {
			select {
			case _, open = <-w:
			case <-deadline:
				t.Fatalf("watch %d still open after the client closed", i)
			}
		}
	}
}
