//go:build !cgo

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/generic"
	kinesqlite "github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/query"
)

func openTestDB(t *testing.T) *sql.DB {
	t.Helper()
	return openTestDBWith(t, "_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate&cache=shared&_stmt_cache_size=20")
}

// openTestDBWith opens a fresh database with kine's SQLite parameters
// params and makes a table kv in it.
func openTestDBWith(t *testing.T, params string) *sql.DB {
	t.Helper()
	dsn, err := moderncDSN(filepath.Join(t.TempDir(), "test.db"), params)
	if err != nil {
		t.Fatal(err)
	}
	db, err := open(dsn, generic.ConnectionPoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE kv (name TEXT PRIMARY KEY, value INTEGER)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// The same statement asked for while its rows are still open (one
// transaction, one connection) gets a statement of its own; both read
// what they should.
func TestStatementInUseIsNotShared(t *testing.T) {
	db := openTestDB(t)
	for i := range 3 {
		if _, err := db.Exec(`INSERT INTO kv(name, value) VALUES(?, ?)`, fmt.Sprint("k", i), i); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const q = `SELECT name, value FROM kv WHERE value >= ? ORDER BY name`
	outer, err := tx.Query(q, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for outer.Next() {
		var name string
		var value int
		if err := outer.Scan(&name, &value); err != nil {
			t.Fatal(err)
		}
		var inner int
		if err := tx.QueryRow(`SELECT COUNT(*) FROM kv WHERE value >= ?`, value).Scan(&inner); err != nil {
			t.Fatal(err)
		}
		innerRows, err := tx.Query(q, value)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for innerRows.Next() {
			n++
		}
		innerRows.Close()
		if n != inner || n != 3-value {
			t.Errorf("at %s: the same query nested read %d rows, want %d", name, n, 3-value)
		}
		names = append(names, name)
	}
	if err := outer.Err(); err != nil {
		t.Fatal(err)
	}
	outer.Close()
	if fmt.Sprint(names) != "[k0 k1 k2]" {
		t.Errorf("outer query read %v", names)
	}
}

// More distinct statements than a connection keeps: the evicted ones are
// closed, and each still answers right when run again.
func TestManyStatements(t *testing.T) {
	db := openTestDB(t)
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`INSERT INTO kv(name, value) VALUES('a', 1)`); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		for i := range 3 * maxStatements {
			var got int
			if err := db.QueryRow(fmt.Sprintf(`SELECT value + %d FROM kv WHERE name = ?`, i), "a").Scan(&got); err != nil {
				t.Fatalf("round %d, statement %d: %v", round, i, err)
			}
			if got != 1+i {
				t.Fatalf("round %d, statement %d: got %d", round, i, got)
			}
		}
	}
}

// Writers and readers on many connections at once, as kine runs them.
func TestConcurrentWritesAndReads(t *testing.T) {
	db := openTestDB(t)
	ctx := context.Background()
	writeConcurrently(t, func(w, i int) error {
		name := fmt.Sprintf("w%d-%d", w, i)
		if err := insertInTx(ctx, db, name, i); err != nil {
			return err
		}
		var got int
		if err := db.QueryRow(`SELECT value FROM kv WHERE name = ?`, name).Scan(&got); err != nil || got != i {
			return fmt.Errorf("%s read back %d (%v)", name, got, err)
		}
		return nil
	})
	expectRows(t, db, 400)
}

// writeConcurrently runs write(w, i) for 50 rounds i in each of 8 writers
// w at once; a writer stops at its first error, which fails the test.
func writeConcurrently(t *testing.T, write func(w, i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if err := write(w, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// insertInTx inserts one row of kv in a transaction of its own.
func insertInTx(ctx context.Context, db *sql.DB, name string, value int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if _, err := tx.Exec(`INSERT INTO kv(name, value) VALUES(?, ?)`, name, value); err != nil {
		tx.Rollback()
		return fmt.Errorf("insert in a transaction: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func expectRows(t *testing.T, db *sql.DB, want int) {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM kv`).Scan(&n); err != nil || n != want {
		t.Errorf("%d rows (%v), want %d", n, err, want)
	}
}

func TestModerncDSN(t *testing.T) {
	dsn, err := moderncDSN("/data/db/state.db", "_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate&_stmt_cache_size=20&cache=shared&_kine_disable_startup_vacuum")
	if err != nil {
		t.Fatal(err)
	}
	want := "file:///data/db/state.db?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	if dsn != want {
		t.Errorf("got  %s\nwant %s", dsn, want)
	}
	if _, err := moderncDSN("x", "%zz"); err == nil {
		t.Error("a malformed query was accepted")
	}
}

// The connections the statement cache opens run with kine's settings:
// WAL (a committed write survives kill -9), synchronous NORMAL, kine's
// busy timeout.
func TestConnectionsHaveKineSettings(t *testing.T) {
	db := openTestDB(t)
	db.SetMaxOpenConns(3)
	for range 3 {
		var journal string
		var synchronous, busy int
		if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&journal); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`PRAGMA synchronous`).Scan(&synchronous); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(`PRAGMA busy_timeout`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if journal != "wal" || synchronous != 1 || busy != 30000 {
			t.Errorf("journal_mode %s, synchronous %d, busy_timeout %d; want wal, 1 (NORMAL), 30000", journal, synchronous, busy)
		}
	}
}

// Eight writers at once, in transactions and in single statements, never
// find SQLite's write lock taken: they wait for one another at the gate.
// Without it, the first collision fails with "database is locked".
func TestWritersTakeTurnsAtTheGate(t *testing.T) {
	// SQLite's busy timeout at zero: a writer that finds the database
	// locked fails at once instead of sleeping and retrying, so only the
	// write gate keeps writers apart.
	db := openTestDBWith(t, "_journal_mode=WAL&_busy_timeout=0&_synchronous=NORMAL&_txlock=immediate")
	ctx := context.Background()
	writeConcurrently(t, func(w, i int) error {
		if err := insertInTx(ctx, db, fmt.Sprintf("tx%d-%d", w, i), i); err != nil {
			return err
		}
		if _, err := db.Exec(`INSERT INTO kv(name, value) VALUES(?, ?)`, fmt.Sprintf("st%d-%d", w, i), i); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		return nil
	})
	expectRows(t, db, 800)
}

// While a transaction holds the gate, reads go on, and a write that cannot
// wait (its context ends) fails with an error instead of hanging.
func TestGateHoldsWritesOnly(t *testing.T) {
	db := openTestDB(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO kv(name, value) VALUES('held', 1)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM kv`).Scan(&n); err != nil || n != 0 {
		t.Errorf("a read beside the open transaction: %d rows (%v), want 0", n, err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := db.ExecContext(short, `INSERT INTO kv(name, value) VALUES('blocked', 1)`); err == nil {
		t.Error("a write passed the gate a transaction holds")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO kv(name, value) VALUES('after', 1)`); err != nil {
		t.Errorf("a write after the transaction ended: %v", err)
	}
}

func TestWritesClassifiesStatements(t *testing.T) {
	for query, want := range map[string]bool{
		"SELECT 1":                             false,
		"\n\t  select name FROM kine":          false,
		"(SELECT 1) UNION (SELECT 2)":          false,
		"INSERT INTO kine VALUES(1)":           true,
		"DELETE FROM kine WHERE id = 1":        true,
		"PRAGMA wal_checkpoint(TRUNCATE)":      true,
		"WITH x AS (SELECT 1) DELETE FROM k":   true,
		"with x as (select 1) update k set":    true,
		"WITH x AS (SELECT 1) SELECT * FROM x": false,
		"WITH deleted AS (SELECT 1) SELECT 2":  false,
		"":                                     true,
	} {
		if got := writes(query); got != want {
			t.Errorf("writes(%q) = %v, want %v", query, got, want)
		}
	}
}

// kine's own statements: its reads (the WITH that reads one key on every
// update and create among them) pass no gate, its writes do.
func TestWritesClassifiesKineStatements(t *testing.T) {
	dialect := kineDialect(t)
	reads := map[string]bool{}
	for _, name := range []string{"GetSingle", "GetSingleVal", "AllCurrent", "AllCurrentVal", "ListCurrent", "ListCurrentVal",
		"ListRevisionStart", "ListRevisionStartVal", "GetRevisionAfter", "GetRevisionAfterVal", "CountAllCurrent", "CountCurrent",
		"CountAllRevision", "CountRevision",
		"AfterOldVal", "AfterAllOldVal", "AfterSingleOldVal", "CurrentRev", "CompactRev", "GetSize"} {
		reads[name] = true
	}
	v := reflect.ValueOf(dialect).Elem()
	checked := 0
	for i := range v.NumField() {
		named, ok := v.Field(i).Interface().(*query.Named)
		if !ok || named == nil {
			continue
		}
		name := strings.TrimSuffix(v.Type().Field(i).Name, "SQL")
		if got, want := writes(named.Query), !reads[name]; got != want {
			t.Errorf("%s: writes = %v, want %v:\n%s", name, got, want, named.Query)
		}
		checked++
	}
	if checked < len(reads)+4 {
		t.Fatalf("only %d of kine's statements found", checked)
	}
}

// kineDialect is kine's SQLite dialect, as kine builds it, over a fresh
// database with kine's schema.
func kineDialect(t *testing.T) *generic.Generic {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wg := &sync.WaitGroup{}
	t.Cleanup(func() { cancel(); wg.Wait() })
	path := filepath.Join(t.TempDir(), "state.db")
	_, dialect, err := kinesqlite.NewVariant(ctx, wg, "sqlite3", &drivers.Config{DataSourceName: path + "?" + kinesqlite.DefaultParams})
	if err != nil {
		t.Fatal(err)
	}
	return dialect
}
