package kine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// kine answers on a unix socket in the data dir that only its owner may
// use, replacing the socket a killed server left behind; in a data dir too
// deep for a unix socket it answers on loopback TCP.
func TestKineListens(t *testing.T) {
	short := t.TempDir()
	// A stale socket file, as a kill -9 leaves it.
	if err := os.WriteFile(filepath.Join(short, "kine.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", maxSocketPath))
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, scheme string
	}{
		{"unix socket", short, "unix://"},
		{"loopback tcp", deep, "http://127.0.0.1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			k, err := Listen(ctx, Config{Endpoint: SQLiteEndpoint(filepath.Join(tc.dir, "db", "state.db")), SocketDir: tc.dir})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			defer func() {
				k.StopServing()
				cancel()
				k.Wait()
			}()
			if len(k.Endpoints) != 1 || !strings.HasPrefix(k.Endpoints[0], tc.scheme) {
				t.Fatalf("endpoints %v, want one starting %s", k.Endpoints, tc.scheme)
			}
			if tc.scheme == "unix://" {
				info, err := os.Stat(strings.TrimPrefix(k.Endpoints[0], "unix://"))
				if err != nil {
					t.Fatal(err)
				}
				if info.Mode()&os.ModeSocket == 0 || info.Mode().Perm() != 0o600 {
					t.Errorf("kine.sock is %v, want a socket of mode 0600", info.Mode())
				}
			}
			client, err := clientv3.New(clientv3.Config{Endpoints: k.Endpoints})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if _, err := client.Put(ctx, "/registry/x", "v"); err != nil {
				t.Fatal(err)
			}
			got, err := client.Get(ctx, "/registry/x")
			if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
				t.Fatalf("read back %v (%v)", got, err)
			}
		})
	}
}

// An endpoint naming no backend kplane links fails start-up, naming the
// scheme and not the rest (which may hold credentials).
func TestUnknownBackendIsRefused(t *testing.T) {
	_, err := Listen(context.Background(), Config{Endpoint: "nats://user:secret@host:4222", SocketDir: t.TempDir()})
	if err == nil {
		t.Fatal("an endpoint of a backend kplane does not link was served")
	}
	if !strings.Contains(err.Error(), "nats") || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q should name the scheme and not the credentials", err)
	}
}
