package datastore

import (
	"context"
	"strings"
	"testing"
)

func TestKindOf(t *testing.T) {
	good := map[string]Kind{
		"":                                     SQLite,
		"etcd":                                 EmbeddedEtcd,
		"http://127.0.0.1:2379":                ExternalEtcd,
		"https://a:2379,https://b:2379":        ExternalEtcd,
		"postgres://u:p@localhost:5432/kplane": Postgres,
		"mysql://u:p@tcp(localhost:3306)/k":    MySQL,
		"sqlite:///tmp/x.db":                   SQLite,
	}
	for ep, want := range good {
		if got, err := KindOf(ep); err != nil || got != want {
			t.Errorf("KindOf(%q) = %q, %v; want %q", ep, got, err, want)
		}
	}
	for _, ep := range []string{"foo", "ftp://x", "http://", "http://a:1,notaurl", "sqlite://"} {
		if _, err := KindOf(ep); err == nil {
			t.Errorf("KindOf(%q): want error", ep)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("KindOf(%q): error must be one line: %q", ep, err)
		}
	}
}

func TestRedact(t *testing.T) {
	if got := Redact("postgres://kplane:s3cret@db:5432/kplane"); strings.Contains(got, "s3cret") {
		t.Fatalf("password leaked: %s", got)
	}
	if got := Redact("http://127.0.0.1:2379"); got != "http://127.0.0.1:2379" {
		t.Fatalf("got %s", got)
	}
}

func TestUnreachable(t *testing.T) {
	ctx := context.Background()
	_, err := Listen(ctx, Config{Endpoint: "postgres://u:secret@127.0.0.1:1/db", DataDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "unreachable") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("postgres: got %v", err)
	}
	_, err = Listen(ctx, Config{Endpoint: "http://127.0.0.1:1", DataDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("etcd: got %v", err)
	}
}

// Exactly one driver claims each endpoint form, so the order of the list
// decides nothing.
func TestDriversDoNotOverlap(t *testing.T) {
	for _, ep := range []string{"", "etcd", "http://127.0.0.1:2379", "https://a:2379,https://b:2379",
		"postgres://u:p@localhost/k", "postgresql://localhost/k", "mysql://u:p@tcp(localhost:3306)/k", "sqlite:///tmp/x.db",
		"foo", "ftp://x", "http://"} {
		claimed := 0
		for _, d := range drivers() {
			if _, ok, _ := d.Kind(ep); ok {
				claimed++
			}
		}
		want := 1
		if ep == "foo" || ep == "ftp://x" {
			want = 0
		}
		if claimed != want {
			t.Errorf("%q is claimed by %d drivers, want %d", ep, claimed, want)
		}
	}
}
