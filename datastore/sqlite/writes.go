//go:build !cgo

package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
)

// writeGate lets one connection of the pool write at a time. SQLite itself
// takes one writer at a time and makes the others retry through its busy
// handler, which sleeps 1, 2, 5, 10, 15, 20, 25 ms between tries: with
// eight writes in flight (a plane's reset, eight clients creating planes)
// the last ones slept 5-22 ms for a lock held well under a millisecond.
// Waiting here takes the lock once it is free. It is a sync.Mutex, which
// lets a running writer take a free lock before a waiter that is not yet
// scheduled (and turns first-come after a waiter has waited a
// millisecond), rather than a first-come semaphore that hands the lock to
// a waiter the scheduler may not run for a while when both cores are busy.
// Reads are not gated: in WAL mode they never wait for a writer.
type writeGate struct {
	mu sync.Mutex
	// timeout bounds a wait as SQLite's busy timeout would have.
	timeout time.Duration
}

func newWriteGate(timeout time.Duration) *writeGate {
	return &writeGate{timeout: timeout}
}

// enter waits for the gate, at most until ctx ends or the timeout passes;
// leave must follow a nil error.
func (g *writeGate) enter(ctx context.Context) error {
	if g.mu.TryLock() {
		return nil
	}
	locked := make(chan struct{})
	go func() {
		g.mu.Lock()
		close(locked)
	}()
	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	var err error
	select {
	case <-locked:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = fmt.Errorf("no turn within %s", g.timeout)
	}
	// The lock is still coming: give it back once it does.
	go func() {
		<-locked
		g.mu.Unlock()
	}()
	return fmt.Errorf("waiting to write to SQLite: %w", err)
}

func (g *writeGate) leave() { g.mu.Unlock() }

// writes reports whether query may write: anything but a plain read. A
// read is a SELECT, or a WITH whose statement is a SELECT (kine reads one
// key that way, on every update and create); a WITH can also lead an
// INSERT, UPDATE or DELETE, so one that names any of them is a write.
// kine's transactions are all begun IMMEDIATE (they take SQLite's write
// lock at once), so every transaction passes the gate too.
func writes(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n(")
	switch firstWord(q) {
	case "SELECT":
		return false
	case "WITH":
		return namesWrite(strings.ToUpper(q))
	}
	return true
}

// writeKeywords are the statements a WITH may lead that write.
var writeKeywords = []string{"INSERT", "UPDATE", "DELETE", "REPLACE"}

// namesWrite reports whether the upper-case statement q has a write
// keyword as a word of its own.
func namesWrite(q string) bool {
	for _, word := range strings.FieldsFunc(q, func(r rune) bool { return !unicode.IsLetter(r) && r != '_' }) {
		if slices.Contains(writeKeywords, word) {
			return true
		}
	}
	return false
}

// firstWord is q's leading keyword in upper case.
func firstWord(q string) string {
	end := strings.IndexFunc(q, func(r rune) bool { return !unicode.IsLetter(r) })
	if end < 0 {
		end = len(q)
	}
	return strings.ToUpper(q[:end])
}

// gatedTx leaves the gate when its transaction ends.
type gatedTx struct {
	driver.Tx
	conn *cachingConn
}

func (t *gatedTx) Commit() error {
	defer t.conn.endTx()
	return t.Tx.Commit()
}

func (t *gatedTx) Rollback() error {
	defer t.conn.endTx()
	return t.Tx.Rollback()
}

// BeginTx implements driver.ConnBeginTx: the transaction holds the gate
// until it ends.
func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.gate.enter(ctx); err != nil {
		return nil, err
	}
	tx, err := c.baseConn.BeginTx(ctx, opts)
	if err != nil {
		c.gate.leave()
		return nil, err
	}
	c.inTx = true
	return &gatedTx{Tx: tx, conn: c}, nil
}

func (c *cachingConn) endTx() {
	if c.inTx {
		c.inTx = false
		c.gate.leave()
	}
}

// enterFor passes the gate for a statement run outside a transaction that
// may write; the returned function leaves it.
func (c *cachingConn) enterFor(ctx context.Context, query string) (func(), error) {
	if c.inTx || !writes(query) {
		return func() {}, nil
	}
	if err := c.gate.enter(ctx); err != nil {
		return nil, err
	}
	return c.gate.leave, nil
}
