//go:build !cgo

package sqlite

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/semaphore"
)

// writeGate lets one connection of the pool write at a time, in the order
// they asked. SQLite itself takes one writer at a time and makes the others
// retry through its busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25 ms
// between tries: with eight writes in flight (a plane's reset, eight
// clients creating planes) the last ones slept 5-22 ms for a lock held well
// under a millisecond. Waiting here hands the lock over once it is free.
// Reads are not gated: in WAL mode they never wait for a writer.
type writeGate struct {
	sem *semaphore.Weighted
	// timeout bounds a wait as SQLite's busy timeout would have.
	timeout time.Duration
}

func newWriteGate(timeout time.Duration) *writeGate {
	return &writeGate{sem: semaphore.NewWeighted(1), timeout: timeout}
}

// enter waits for the gate; leave must follow.
func (g *writeGate) enter(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if err := g.sem.Acquire(ctx, 1); err != nil {
		return fmt.Errorf("waiting to write to SQLite: %w", err)
	}
	return nil
}

func (g *writeGate) leave() { g.sem.Release(1) }

// writes reports whether query may write: anything but a plain read. kine's
// transactions are all begun IMMEDIATE (they take SQLite's write lock at
// once), so every transaction passes the gate too.
func writes(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n(")
	return len(q) < 6 || !strings.EqualFold(q[:6], "SELECT")
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
