package kine

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"kplane.dev/kplane/datastore/driver"
)

// The kinds of datastore kine serves.
const (
	SQLite   driver.Kind = "sqlite"
	Postgres driver.Kind = "postgres"
	MySQL    driver.Kind = "mysql"
)

// Driver serves "" (SQLite in the data dir), sqlite://<path>,
// postgres(ql)://… and mysql://… through kine.
type Driver struct{}

var _ driver.Driver = Driver{}

// Kind implements driver.Driver.
func (Driver) Kind(endpoint string) (driver.Kind, bool, error) {
	if endpoint == "" {
		return SQLite, true, nil
	}
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok {
		return "", false, nil
	}
	switch scheme {
	case "postgres", "postgresql":
		if _, err := url.Parse(endpoint); err != nil {
			return "", true, fmt.Errorf("datastore endpoint %q is malformed: %v", driver.Redact(endpoint), err)
		}
		return Postgres, true, nil
	case "mysql":
		return MySQL, true, nil
	case "sqlite":
		if strings.TrimPrefix(endpoint, "sqlite://") == "" {
			return "", true, fmt.Errorf("datastore endpoint %q is malformed: sqlite://<path> needs a path", endpoint)
		}
		return SQLite, true, nil
	}
	return "", false, nil
}

// Listen implements driver.Driver: kine runs in the process until the
// datastore is closed.
func (Driver) Listen(ctx context.Context, kind driver.Kind, cfg driver.Config) (*driver.Datastore, error) {
	switch kind {
	case SQLite:
		path := filepath.Join(cfg.DataDir, "db", "state.db")
		if strings.HasPrefix(cfg.Endpoint, "sqlite://") {
			path = strings.TrimPrefix(cfg.Endpoint, "sqlite://")
			path, _, _ = strings.Cut(path, "?")
		}
		return start(ctx, cfg, kind, SQLiteEndpoint(path), "sqlite at "+path)
	case Postgres, MySQL:
		if err := preflightTCP(ctx, cfg.Endpoint, kind); err != nil {
			return nil, err
		}
		return start(ctx, cfg, kind, cfg.Endpoint, fmt.Sprintf("%s at %s", kind, driver.Redact(cfg.Endpoint)))
	}
	return nil, fmt.Errorf("datastore endpoint %q: not a kine datastore", driver.Redact(cfg.Endpoint))
}

func start(ctx context.Context, cfg driver.Config, kind driver.Kind, endpoint, description string) (*driver.Datastore, error) {
	sctx, cancel := context.WithCancel(context.Background())
	k, err := Listen(sctx, Config{
		Endpoint:     endpoint,
		SocketDir:    cfg.DataDir,
		CAFile:       cfg.CAFile,
		CertFile:     cfg.CertFile,
		KeyFile:      cfg.KeyFile,
		StartTimeout: cfg.StartTimeout,
		Metrics:      cfg.MetricsRegisterer,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("datastore %s: %w", description, err)
	}
	done := make(chan struct{})
	go func() {
		<-sctx.Done()
		k.Wait()
		close(done)
	}()
	stop := func() {
		k.StopServing()
		cancel()
	}
	return driver.Embedded(driver.Datastore{Kind: kind, Description: description, Endpoints: k.Endpoints, BatchDeletes: k.BatchDeletes,
		InProcess: k.InProcess}, stop, done), nil
}

// preflightTCP fails fast when a SQL server cannot be reached at all; kine
// itself retries for minutes.
func preflightTCP(ctx context.Context, endpoint string, kind driver.Kind) error {
	host := hostPort(endpoint, kind)
	if host == "" {
		return nil
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("datastore %q is unreachable: %v", driver.Redact(endpoint), err)
	}
	return conn.Close()
}

func hostPort(endpoint string, kind driver.Kind) string {
	switch kind {
	case Postgres:
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" {
			return ""
		}
		if u.Port() == "" {
			return net.JoinHostPort(u.Hostname(), "5432")
		}
		return u.Host
	case MySQL:
		// mysql://user:pass@tcp(host:port)/db
		_, rest, _ := strings.Cut(endpoint, "tcp(")
		host, _, ok := strings.Cut(rest, ")")
		if !ok {
			return ""
		}
		return host
	}
	return ""
}
