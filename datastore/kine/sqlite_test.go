package kine

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// kine over SQLite, served by kplane's backend (statements kept prepared):
// creates, updates and deletes through the etcd API read back right, also
// after kine is started again on the same file.
func TestSQLiteWritesReadBackAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	endpoint := SQLiteEndpoint(filepath.Join(dir, "db", "state.db"))
	ctx := context.Background()
	run := func(f func(client *clientv3.Client)) {
		t.Helper()
		client, stop := startTestKine(t, Config{Endpoint: endpoint, SocketDir: dir}, grpcServer())
		defer stop()
		defer client.Close()
		f(client)
	}
	const keys = 200
	key := func(i int) string { return fmt.Sprintf("/registry/configmaps/p/default/cm-%03d", i) }
	run(func(client *clientv3.Client) {
		for i := range keys {
			create, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key(i)), "=", 0)).
				Then(clientv3.OpPut(key(i), "v1")).Commit()
			if err != nil || !create.Succeeded {
				t.Fatalf("create %s: %v %v", key(i), err, create)
			}
			switch i % 3 {
			case 1:
				update, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key(i)), "=", create.Header.Revision)).
					Then(clientv3.OpPut(key(i), "v2")).Else(clientv3.OpGet(key(i))).Commit()
				if err != nil || !update.Succeeded {
					t.Fatalf("update %s: %v %v", key(i), err, update)
				}
			case 2:
				del, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key(i)), "=", create.Header.Revision)).
					Then(clientv3.OpDelete(key(i))).Else(clientv3.OpGet(key(i))).Commit()
				if err != nil || !del.Succeeded {
					t.Fatalf("delete %s: %v %v", key(i), err, del)
				}
			}
		}
	})
	for range 2 {
		run(func(client *clientv3.Client) {
			list, err := client.Get(ctx, "/registry/configmaps/p/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, kv := range list.Kvs {
				got[string(kv.Key)] = string(kv.Value)
			}
			for i := range keys {
				want := map[int]string{0: "v1", 1: "v2", 2: ""}[i%3]
				if got[key(i)] != want {
					t.Errorf("%s = %q, want %q", key(i), got[key(i)], want)
				}
			}
			if len(got) != keys-keys/3 {
				t.Errorf("%d keys listed, want %d", len(got), keys-keys/3)
			}
		})
	}
}

// startTestKine starts kine on server with cfg and connects an etcd
// client to it; stop stops kine and waits for it.
func startTestKine(t *testing.T, cfg Config, server *grpc.Server) (client *clientv3.Client, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	k, err := listen(ctx, cfg, server)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stop = func() {
		k.StopServing()
		cancel()
		k.Wait()
	}
	client, err = clientv3.New(clientv3.Config{Endpoints: k.Endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	return client, stop
}
