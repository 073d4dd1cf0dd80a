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
	records := []record{
		{"/registry/a/live", 0, 0, "v1"},
		{"/registry/a/live", 0, 1, "v2"},
		{"/registry/a/gone", 0, 0, "g1"},
		{"/registry/a/gone", 1, 3, "g1"},
		{"compact_rev_key", 0, 2, ""},
		{"/registry/a/other", 0, 0, "o1"},
	}
	insertRecords(t, kines.DB, records)
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

// record is one row of kine's table, as a test writes it.
type record struct {
	name                  string
	deleted, prevRevision int
	value                 string
}

// insertRecords writes records into kine's table, in order (their ids).
func insertRecords(t *testing.T, db *sql.DB, records []record) {
	t.Helper()
	for _, r := range records {
		if _, err := db.Exec(`INSERT INTO kine(name, created, deleted, create_revision, prev_revision, lease, value, old_value) VALUES(?, 1, ?, 0, ?, 0, ?, NULL)`,
			r.name, r.deleted, r.prevRevision, []byte(r.value)); err != nil {
			t.Fatal(err)
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

// The range statements answer kine's exactly: every range (with live keys,
// keys whose newest record is a deletion, keys outside it, none at all),
// at every revision, with and without deleted records, keys only or with
// values, with limits that cut the range or not.
func TestRangeReadsAnswerAsKines(t *testing.T) {
	kines := kineDialect(t)
	ours := &generic.Generic{}
	useRangeReads(ours)
	records := []record{
		{"/registry/a/b", 0, 0, "b1"},
		{"/registry/a/c", 0, 0, "c1"},
		{"/registry/a/b", 0, 1, "b2"},
		{"compact_rev_key", 0, 1, ""},
		{"/registry/a/d", 0, 0, "d1"},
		{"/registry/a/d", 1, 5, "d1"},
		{"/registry/a/e", 0, 0, "e1"},
		{"/registry/b/x", 0, 0, "x1"},
		{"/registry/a/c", 0, 2, "c2"},
		{"/registry/a/a", 0, 0, "a1"},
	}
	insertRecords(t, kines.DB, records)
	var newest int64
	if err := kines.DB.QueryRow(`SELECT MAX(id) FROM kine`).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	ranges := [][2]string{{"/registry/a/", "/registry/a0"}, {"/registry/a/c", "/registry/a0"}, {"/registry/", "/registry0"}, {"/registry/z/", "/registry/z0"}}
	lists := []struct{ kine, ours *query.Named }{
		{kines.ListCurrentSQL, ours.ListCurrentSQL},
		{kines.ListCurrentValSQL, ours.ListCurrentValSQL},
	}
	atRevision := []struct{ kine, ours *query.Named }{
		{kines.GetRevisionAfterSQL, ours.GetRevisionAfterSQL},
		{kines.GetRevisionAfterValSQL, ours.GetRevisionAfterValSQL},
	}
	compare := func(kine, ours *query.Named, args ...any) {
		t.Helper()
		want := rowsOf(t, kines.DB, kine, args...)
		got := rowsOf(t, kines.DB, ours, args...)
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("%s %v:\n got %v\nwant %v", ours.Name, args, got, want)
		}
	}
	for _, r := range ranges {
		for _, includeDeleted := range []bool{false, true} {
			for _, limit := range []int64{0, 1, 2, 3} {
				for _, s := range lists {
					compare(s.kine.WithLimit(limit), s.ours.WithLimit(limit), r[0], r[1], includeDeleted)
				}
				for revision := int64(1); revision <= newest; revision++ {
					for _, s := range atRevision {
						compare(s.kine.WithLimit(limit), s.ours.WithLimit(limit), r[0], r[1], revision, includeDeleted)
					}
				}
			}
		}
	}
}
