//go:build !cgo

package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/generic"
	kinesqlite "github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/server"
	"github.com/prometheus/client_golang/prometheus/collectors"
	moderncsqlite "modernc.org/sqlite"
)

// kine's registry of backends is its own door: an endpoint names its backend
// by scheme.
func init() { drivers.Register(Scheme, newBackend) }

// newBackend builds kine's SQLite backend, then gives its dialect a pool of
// connections that keep their statements prepared. Nothing has used the
// dialect yet: kine starts the backend once it is built. The backend also
// deletes many records in one transaction (batchBackend).
func newBackend(ctx context.Context, wg *sync.WaitGroup, cfg *drivers.Config) (bool, server.Backend, error) {
	path, params, _ := strings.Cut(cfg.DataSourceName, "?")
	dsn, err := moderncDSN(path, params)
	if err != nil {
		return false, nil, err
	}
	kineCfg := *cfg
	// The pool kine opens is replaced: its statistics would describe a
	// closed pool. The replacement's are registered instead.
	kineCfg.MetricsRegisterer = nil
	backend, dialect, err := kinesqlite.NewVariant(ctx, wg, "sqlite3", &kineCfg)
	if err != nil {
		return false, nil, err
	}
	db, err := open(dsn, cfg.ConnectionPoolConfig)
	if err != nil {
		return false, nil, fmt.Errorf("opening %s: %w", path, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		_ = db.Close()
	}()
	if cfg.MetricsRegisterer != nil {
		cfg.MetricsRegisterer.MustRegister(collectors.NewDBStatsCollector(db, "kine"))
	}
	replaced := dialect.DB
	dialect.DB = db
	useSingleKeyReads(dialect)
	useRangeReads(dialect)
	// kine closes it again when ctx ends, which database/sql allows.
	_ = replaced.Close()
	return false, batchBackend{Backend: backend, dialect: dialect}, nil
}

// open is database/sql over the pure-Go driver, with kine's pool settings.
func open(dsn string, pool generic.ConnectionPoolConfig) (*sql.DB, error) {
	base, err := moderncsqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(statementCache{Connector: base, gate: newWriteGate(writeWaitLimit)})
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, err
	}
	maxIdle := pool.MaxIdle
	if maxIdle == 0 {
		maxIdle = defaultMaxIdle
	}
	db.SetMaxIdleConns(maxIdle)
	db.SetMaxOpenConns(pool.MaxOpen)
	db.SetConnMaxLifetime(pool.MaxLifetime)
	db.SetConnMaxIdleTime(pool.MaxIdleTime)
	return db, nil
}

// writeWaitLimit bounds a wait for the write gate as kine's busy timeout
// (30 s) bounded a wait for SQLite's lock.
const writeWaitLimit = 30 * time.Second

// defaultMaxIdle is kine's: database/sql keeps 2, kine's load wants more.
const defaultMaxIdle = 20

// moderncDSN is the pure-Go driver's form of kine's SQLite parameters
// (go-sqlite3's names): the journal, busy timeout, synchronous mode and
// transaction lock; go-sqlite3's cache options have no counterpart, and
// kine's own flags are kine's.
func moderncDSN(path, params string) (string, error) {
	values, err := url.ParseQuery(params)
	if err != nil {
		return "", fmt.Errorf("sqlite parameters %q: %w", params, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	out := url.Values{}
	// In a fixed order: the same parameters give the same DSN.
	for _, key := range slices.Sorted(maps.Keys(values)) {
		for _, v := range values[key] {
			switch key {
			case "_journal_mode", "_journal":
				out.Add("_pragma", "journal_mode("+v+")")
			case "_busy_timeout", "_timeout":
				out.Add("_pragma", "busy_timeout("+v+")")
			case "_synchronous", "_sync":
				out.Add("_pragma", "synchronous("+v+")")
			case "_txlock":
				out.Add("_txlock", v)
			}
		}
	}
	query, err := url.QueryUnescape(out.Encode())
	if err != nil {
		return "", err
	}
	return "file://" + abs + "?" + query, nil
}
