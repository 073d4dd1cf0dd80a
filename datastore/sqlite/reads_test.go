//go:build !cgo

package sqlite

import (
	"database/sql"
	"reflect"
	"testing"

	"github.com/k3s-io/kine/pkg/drivers/generic"
	"github.com/k3s-io/kine/pkg/query"
)

// The single-key statements answer kine's exactly: for a live key, a key
// whose newest record is a deletion (with and without deleted records),
// a key with no record, keys only or with values.
func TestSingleKeyReadsAnswerAsKines(t *testing.T) {
	kines := kineDialect(t)
	// Only the statements are ours; both run on kine's database.
	ours := &generic.Generic{}
	useSingleKeyReads(ours)
	records := []struct {
		name                  string
		deleted, prevRevision int
		value                 string
	}{
		{"/registry/a/live", 0, 0, "v1"},
		{"/registry/a/live", 0, 1, "v2"},
		{"/registry/a/gone", 0, 0, "g1"},
		{"/registry/a/gone", 1, 3, "g1"},
		{"compact_rev_key", 0, 2, ""},
		{"/registry/a/other", 0, 0, "o1"},
	}
	for _, r := range records {
		if _, err := kines.DB.Exec(`INSERT INTO kine(name, created, deleted, create_revision, prev_revision, lease, value, old_value) VALUES(?, 1, ?, 0, ?, 0, ?, NULL)`,
			r.name, r.deleted, r.prevRevision, []byte(r.value)); err != nil {
			t.Fatal(err)
		}
	}
	statements := []struct{ kine, ours *query.Named }{
		{kines.GetSingleSQL, ours.GetSingleSQL},
		{kines.GetSingleValSQL, ours.GetSingleValSQL},
	}
	for _, key := range []string{"/registry/a/live", "/registry/a/gone", "/registry/a/missing"} {
		for _, includeDeleted := range []bool{false, true} {
			for _, s := range statements {
				want := rowsOf(t, kines.DB, s.kine, key, includeDeleted)
				got := rowsOf(t, kines.DB, s.ours, key, includeDeleted)
				if len(want) != 1 || !reflect.DeepEqual(got, want) {
					t.Errorf("%s %s, deleted records %v:\n got %v\nwant %v", s.ours.Name, key, includeDeleted, got, want)
				}
			}
		}
	}
}

func rowsOf(t *testing.T, db *sql.DB, q *query.Named, args ...any) [][]any {
	t.Helper()
	rows, err := db.Query(q.Query, args...)
	if err != nil {
		t.Fatalf("%s: %v", q.Name, err)
	}
	defer rows.Close()
	columns, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]any
	for rows.Next() {
		values := make([]any, len(columns))
		dests := make([]any, len(columns))
		for i := range values {
			dests[i] = &values[i]
		}
		if err := rows.Scan(dests...); err != nil {
			t.Fatal(err)
		}
		out = append(out, values)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
