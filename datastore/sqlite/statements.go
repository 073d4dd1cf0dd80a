//go:build !cgo

package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"

	"k8s.io/utils/lru"
)

// statementCache opens connections that keep the statements they run
// prepared (cachingConn) and write one at a time (writeGate).
type statementCache struct {
	driver.Connector
	gate *writeGate
}

// Connect implements driver.Connector.
func (c statementCache) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newCachingConn(conn, c.gate)
}

// maxStatements bounds the statements one connection keeps. kine runs
// about twenty distinct ones; the rest differ by a LIMIT written into
// them, and the least recently used of those go.
const maxStatements = 64

// The interfaces every connection of the pure-Go driver implements: a
// wrapper that hid them would make database/sql fall back to the
// context-free calls.
type baseConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachingConn runs queries and statements through prepared statements it
// keeps, by SQL text. database/sql uses a connection from one goroutine at
// a time, but a statement can still be in use when it is asked for again
// (a query run while the rows of the same query are open, in one
// transaction): such a call prepares a statement of its own.
type cachingConn struct {
	baseConn
	statements *lru.Cache // SQL -> *cachedStatement
	gate       *writeGate
	// inTx is set while a transaction of the connection holds the gate.
	inTx bool
}

var (
	_ baseConn                          = (*cachingConn)(nil)
	_ interface{ Unwrap() driver.Conn } = (*cachingConn)(nil)
)

func newCachingConn(conn driver.Conn, gate *writeGate) (*cachingConn, error) {
	base, ok := conn.(baseConn)
	if !ok {
		conn.Close()
		return nil, errors.New("the SQLite driver's connection lacks the interfaces the statement cache forwards")
	}
	c := &cachingConn{baseConn: base, gate: gate}
	c.statements = lru.NewWithEvictionFunc(maxStatements, func(_ lru.Key, value any) {
		value.(*cachedStatement).evict()
	})
	return c, nil
}

// Unwrap is the driver's own connection (the pure-Go driver's Limit and
// the like look through a wrapper by it).
func (c *cachingConn) Unwrap() driver.Conn { return c.baseConn }

// cachedStatement is a prepared statement kept by a connection; inUse
// while a call or its rows hold it, and closed once evicted and unused.
type cachedStatement struct {
	stmt    driver.Stmt
	inUse   bool
	evicted bool
}

func (s *cachedStatement) evict() {
	s.evicted = true
	if !s.inUse {
		s.stmt.Close()
	}
}

func (s *cachedStatement) release() {
	s.inUse = false
	if s.evicted {
		s.stmt.Close()
	}
}

// acquire returns a prepared statement of query for one call, and the
// function that gives it back.
func (c *cachingConn) acquire(ctx context.Context, query string) (driver.Stmt, func(), error) {
	if v, ok := c.statements.Get(query); ok {
		if s := v.(*cachedStatement); !s.inUse {
			s.inUse = true
			return s.stmt, s.release, nil
		}
		stmt, err := c.PrepareContext(ctx, query)
		if err != nil {
			return nil, nil, err
		}
		return stmt, func() { stmt.Close() }, nil
	}
	stmt, err := c.PrepareContext(ctx, query)
	if err != nil {
		return nil, nil, err
	}
	s := &cachedStatement{stmt: stmt, inUse: true}
	c.statements.Add(query, s)
	return stmt, s.release, nil
}

// ExecContext implements driver.ExecerContext through a kept statement.
func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	leave, err := c.enterFor(ctx, query)
	if err != nil {
		return nil, err
	}
	defer leave()
	stmt, release, err := c.acquire(ctx, query)
	if err != nil {
		return nil, err
	}
	defer release()
	return stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

// QueryContext implements driver.QueryerContext through a kept statement,
// held (with the write gate, for a query that writes) until the rows are
// closed.
func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	leave, err := c.enterFor(ctx, query)
	if err != nil {
		return nil, err
	}
	stmt, release, err := c.acquire(ctx, query)
	if err != nil {
		leave()
		return nil, err
	}
	rows, err := stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		release()
		leave()
		return nil, err
	}
	return &heldRows{Rows: rows, release: func() { release(); leave() }}, nil
}

// Close closes the kept statements, then the connection.
func (c *cachingConn) Close() error {
	c.endTx()
	c.statements.Clear()
	return c.baseConn.Close()
}

// heldRows gives its statement back when closed.
type heldRows struct {
	driver.Rows
	release func()
}

func (r *heldRows) Close() error {
	err := r.Rows.Close()
	if r.release != nil {
		r.release()
		r.release = nil
	}
	return err
}
