package framework

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DatastoreKeys lists the keys under prefix straight from the server's
// default SQLite datastore (through kine's socket), bypassing the apiserver
// and its caches: what is actually stored.
func (s *Server) DatastoreKeys(tb testing.TB, prefix string) []string {
	tb.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"unix://" + filepath.Join(s.DataDir, "kine.sock")},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		tb.Fatal(err)
	}
	keys := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}
