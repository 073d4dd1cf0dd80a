package datastore

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	certutil "k8s.io/client-go/util/cert"
)

// Watches ending in a burst while events flow must not wedge the watch
// stream every watch of an in-process client shares: in-process, client
// and datastore talk through a pipe that holds no message, so neither may
// wait for the other to read while the other waits for it. After each
// burst a canary watch must see a new write.
func TestInProcessWatchesSurviveBurstsOfCancellations(t *testing.T) {
	for name, endpoint := range map[string]string{"sqlite": "", "embedded-etcd": "etcd"} {
		t.Run(name, func(t *testing.T) {
			store := listenEmbedded(t, endpoint)
			if store.InProcess == nil {
				t.Fatalf("%s: no in-process client", store.Description)
			}
			client := store.InProcess.NewClient()
			defer client.Close()
			burstsOfCancellations(t, client)
		})
	}
}

// listenEmbedded starts the embedded datastore of endpoint in a
// temporary directory.
func listenEmbedded(t *testing.T, endpoint string) *Datastore {
	t.Helper()
	dir := t.TempDir()
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tls := TLS{CAFile: filepath.Join(dir, "ca.crt"), ServerCertFile: filepath.Join(dir, "ca.crt"), ServerKeyFile: filepath.Join(dir, "ca.key")}
	if err := os.WriteFile(tls.CAFile, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tls.ServerKeyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := Listen(ctx, Config{Endpoint: endpoint, DataDir: dir, EmbeddedTLS: tls})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return store
}

func burstsOfCancellations(t *testing.T, client *clientv3.Client) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writes := make(chan struct{})
	go func() {
		defer close(writes)
		for i := 0; ctx.Err() == nil; i++ {
			if _, err := client.Put(ctx, fmt.Sprintf("/registry/w/%d", i%50), "x"); err != nil && ctx.Err() == nil {
				t.Errorf("put: %v", err)
				return
			}
		}
	}()
	canary := client.Watch(ctx, "/registry/canary/", clientv3.WithPrefix())
	for round := 0; round < 20; round++ {
		var stops []context.CancelFunc
		for i := 0; i < 40; i++ {
			wctx, stop := context.WithCancel(ctx)
			stops = append(stops, stop)
			client.Watch(wctx, "/registry/w/", clientv3.WithPrefix())
		}
		for _, stop := range stops {
			stop()
		}
		key := fmt.Sprintf("/registry/canary/%d", round)
		put, err := client.Put(ctx, key, "x")
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.After(20 * time.Second)
		for seen := false; !seen; {
			select {
			case resp, ok := <-canary:
				if !ok || resp.Err() != nil {
					t.Fatalf("round %d: the canary watch ended: %v", round, resp.Err())
				}
				for _, ev := range resp.Events {
					seen = seen || ev.Kv.ModRevision == put.Header.Revision
				}
			case <-deadline:
				t.Fatalf("round %d: the canary watch did not see %s within 20s: the watch stream is wedged", round, key)
			}
		}
	}
	cancel()
	<-writes
}
