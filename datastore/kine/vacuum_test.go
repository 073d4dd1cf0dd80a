package kine

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// A start VACUUMs a database only when compaction freed a good part of
// it: a new one and one without free pages skip it, one with most of its
// pages free keeps kine's VACUUM.
func TestWithoutNeedlessVacuum(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	dsn := SQLiteEndpoint(path)
	if got := withoutNeedlessVacuum(dsn, path); got != dsn {
		t.Fatalf("a new database: %q, want kine's default", got)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE TABLE rows (id INTEGER PRIMARY KEY, value BLOB)")
	for i := range 200 {
		exec("INSERT INTO rows (id, value) VALUES (?, ?)", i, make([]byte, 4096))
	}
	if got := withoutNeedlessVacuum(dsn, path); !strings.HasSuffix(got, "&"+noStartupVacuum) {
		t.Fatalf("a database without free pages: %q, want the VACUUM skipped", got)
	}
	exec("DELETE FROM rows WHERE id >= 20")
	if got := withoutNeedlessVacuum(dsn, path); got != dsn {
		free, pages, err := freePages(path)
		t.Fatalf("a database with %d of %d pages free (%v): %q, want kine's VACUUM", free, pages, err, got)
	}
	if got := withoutNeedlessVacuum(dsn+"&"+noStartupVacuum, path); strings.Count(got, noStartupVacuum) != 1 {
		t.Fatalf("a DSN that skips it already: %q", got)
	}
}
