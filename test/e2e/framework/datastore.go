package framework

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
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

// EmbeddedEtcdClient is an etcd client of the server's embedded etcd
// member (--datastore-endpoint etcd), with the client certificate the
// server itself uses: what the member stores and which members its
// cluster has, bypassing the apiserver. The client is closed when tb ends.
func (s *Server) EmbeddedEtcdClient(tb testing.TB) *clientv3.Client {
	tb.Helper()
	ports, err := os.ReadFile(filepath.Join(s.DataDir, "etcd", "ports"))
	if err != nil {
		tb.Fatal(err)
	}
	fields := strings.Fields(string(ports))
	if len(fields) != 2 {
		tb.Fatalf("etcd/ports of %s: %q", s.DataDir, ports)
	}
	tlsDir := filepath.Join(s.DataDir, "tls")
	tlsInfo := transport.TLSInfo{CertFile: filepath.Join(tlsDir, "etcd-client.crt"), KeyFile: filepath.Join(tlsDir, "etcd-client.key"),
		TrustedCAFile: filepath.Join(tlsDir, "ca.crt")}
	tlsConfig, err := tlsInfo.ClientConfig()
	if err != nil {
		tb.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://127.0.0.1:" + fields[0]}, TLS: tlsConfig,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}
