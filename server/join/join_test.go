package join

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"kplane.dev/kplane/datastore"
)

// startDatastore runs kine over SQLite in a temp dir (the datastore a
// single server runs on) and returns an etcd client of it.
func startDatastore(t *testing.T) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	store, err := datastore.Listen(ctx, datastore.Config{DataDir: t.TempDir()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	client, err := store.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); cancel(); store.Close() })
	return client
}

// joiner joins a new data dir under dir; Generate writes random
// credentials, as a first start would.
func joiner(kv clientv3.KV, dir, token string) Joiner {
	files := Files{CACert: filepath.Join(dir, "tls/ca.crt"), CAKey: filepath.Join(dir, "tls/ca.key"),
		ServiceAccountKey: filepath.Join(dir, "tls/service-account.key"), Tokens: filepath.Join(dir, "tokens.csv")}
	return Joiner{KV: kv, Token: token, Version: "v1.4.0", Issuer: "https://" + filepath.Base(dir), DataDir: dir, Files: files, Generate: func() error {
		var c Credentials
		for _, field := range c.fields() {
			*field = []byte(rand.Text())
		}
		return files.Write(c)
	}}
}

// TestServersStartingAtOnceAgreeOnOneSet: four servers on an empty
// datastore at once: one stores its credentials, the others end up with
// exactly those.
func TestServersStartingAtOnceAgreeOnOneSet(t *testing.T) {
	kv := startDatastore(t)
	const n = 4
	joiners := make([]Joiner, n)
	results := make([]Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		joiners[i] = joiner(kv, t.TempDir(), testToken)
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = joiners[i].Join(context.Background())
		}()
	}
	wg.Wait()
	stored := 0
	var first Credentials
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("server %d: %v", i, errs[i])
		}
		if results[i].Outcome == Stored {
			stored++
		}
		if results[i].ServiceAccountIssuer != results[0].ServiceAccountIssuer {
			t.Fatalf("server %d issues tokens as %s, server 0 as %s", i, results[i].ServiceAccountIssuer, results[0].ServiceAccountIssuer)
		}
		got, err := joiners[i].Files.Read()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = got
		} else if !equal(got, first) {
			t.Fatalf("server %d holds other credentials than server 0", i)
		}
	}
	if stored != 1 {
		t.Fatalf("%d servers stored their credentials (%v), want 1", stored, results)
	}
	// A restart with the data dir it has: nothing to do.
	if r, err := joiners[1].Join(context.Background()); err != nil || r.Outcome != Matched || r.ServiceAccountIssuer != results[0].ServiceAccountIssuer {
		t.Fatalf("restart: %+v, %v", r, err)
	}
}

// TestJoinRefusals: a wrong token, a data dir of another kplane and a
// datastore whose kplane runs without a token are refused, and a refused
// empty data dir stays empty.
func TestJoinRefusals(t *testing.T) {
	kv := startDatastore(t)
	ctx := context.Background()
	if _, err := joiner(kv, t.TempDir(), testToken).Join(ctx); err != nil {
		t.Fatal(err)
	}

	empty := t.TempDir()
	if _, err := joiner(kv, empty, testToken+"-other").Join(ctx); !errors.Is(err, ErrWrongToken) {
		t.Fatalf("wrong token: %v", err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Fatalf("a refused join wrote %d entries into the data dir", len(entries))
	}

	other := joiner(kv, t.TempDir(), testToken)
	if err := other.Generate(); err != nil {
		t.Fatal(err)
	}
	_, err := other.Join(ctx)
	if err == nil || !strings.Contains(err.Error(), "holds another CA") {
		t.Fatalf("data dir of another kplane: %v", err)
	}
	if got, _ := other.Files.Read(); bytes.Equal(got.CACert, mustRecordCA(t, kv)) {
		t.Fatal("the refused data dir's CA was replaced")
	}
}

func TestAKplaneWithoutTokenIsNotSplit(t *testing.T) {
	kv := startDatastore(t)
	ctx := context.Background()
	if _, err := kv.Put(ctx, "/registry/namespaces/default", "{}"); err != nil {
		t.Fatal(err)
	}
	_, err := joiner(kv, t.TempDir(), testToken).Join(ctx)
	if err == nil || !strings.Contains(err.Error(), "restart its first server with the same --join-token") {
		t.Fatalf("new data dir on a kplane without a record: %v", err)
	}
	// Its first server, restarted with the token, stores its own.
	first := joiner(kv, t.TempDir(), testToken)
	if err := first.Generate(); err != nil {
		t.Fatal(err)
	}
	if r, err := first.Join(ctx); err != nil || r.Outcome != Stored {
		t.Fatalf("first server restarted with a token: %+v, %v", r, err)
	}
	local, _ := first.Files.Read()
	if !bytes.Equal(local.CACert, mustRecordCA(t, kv)) {
		t.Fatal("the record holds another CA than the first server's")
	}
	if r, err := joiner(kv, t.TempDir(), testToken).Join(ctx); err != nil || r.Outcome != Fetched || r.ServiceAccountIssuer != first.Issuer {
		t.Fatalf("second server then: %+v, %v", r, err)
	}
}

func mustRecordCA(t *testing.T, kv clientv3.KV) []byte {
	t.Helper()
	resp, err := kv.Get(context.Background(), RecordKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("record: %v", err)
	}
	creds, err := Open(testToken, "v1.4.0", resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return creds.CACert
}
