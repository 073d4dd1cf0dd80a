package datastore

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"kplane.dev/kplane/datastore/etcd"
	"kplane.dev/kplane/datastore/kine"
)

// Kind names the storage behind the etcd API.
type Kind string

const (
	SQLite       Kind = "sqlite"
	EmbeddedEtcd Kind = "embedded-etcd"
	ExternalEtcd Kind = "etcd"
	Postgres     Kind = "postgres"
	MySQL        Kind = "mysql"
)

// Config selects and configures the datastore.
type Config struct {
	// Endpoint is --datastore-endpoint (see the package documentation).
	Endpoint string
	// DataDir holds the embedded stores (db/, etcd/) and their sockets.
	DataDir string
	// CAFile, CertFile, KeyFile: client TLS towards an external etcd or a
	// kine SQL backend that requires it.
	CAFile, CertFile, KeyFile string
	// StartTimeout bounds how long start-up may wait for the datastore.
	StartTimeout time.Duration
	// EmbeddedTLS secures the embedded etcd (server and client certificates).
	EmbeddedTLS etcd.TLS
	// MetricsRegisterer, when set, receives kine's SQL metrics
	// (kine_sql_time_seconds, ...).
	MetricsRegisterer prometheus.Registerer
}

// Datastore is a running (or reachable) datastore.
type Datastore struct {
	Kind Kind
	// Description is safe to log: credentials are redacted.
	Description string
	// Endpoints and the TLS files are what an etcd client connects with.
	Endpoints                 []string
	CAFile, CertFile, KeyFile string

	stop func()
	done <-chan struct{}
}

// Close stops an embedded datastore and waits until its files are closed.
// It is a no-op for an external one.
func (d *Datastore) Close() {
	if d.stop != nil {
		d.stop()
	}
	if d.done != nil {
		<-d.done
	}
}

// Listen starts (or checks) the datastore configured in cfg. ctx bounds the
// start only: an embedded store runs until Close, so that the apiserver can
// finish its own shutdown (which writes) before the store goes away.
func Listen(ctx context.Context, cfg Config) (*Datastore, error) {
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	kind, err := KindOf(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	switch kind {
	case SQLite:
		path := filepath.Join(cfg.DataDir, "db", "state.db")
		if strings.HasPrefix(cfg.Endpoint, "sqlite://") {
			path = strings.TrimPrefix(cfg.Endpoint, "sqlite://")
			path, _, _ = strings.Cut(path, "?")
		}
		return startKine(ctx, cfg, kind, kine.SQLiteEndpoint(path), "sqlite at "+path)
	case Postgres, MySQL:
		if err := preflightTCP(ctx, cfg.Endpoint, kind); err != nil {
			return nil, err
		}
		return startKine(ctx, cfg, kind, cfg.Endpoint, fmt.Sprintf("%s at %s", kind, Redact(cfg.Endpoint)))
	case EmbeddedEtcd:
		sctx, cancel := context.WithCancel(context.Background())
		e, err := etcd.Start(ctx, etcd.Config{DataDir: filepath.Join(cfg.DataDir, "etcd"), TLS: cfg.EmbeddedTLS, StartTimeout: cfg.StartTimeout})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("datastore %q: %w", cfg.Endpoint, err)
		}
		done := make(chan struct{})
		go func() {
			<-sctx.Done()
			e.Close()
			close(done)
		}()
		return &Datastore{
			Kind: kind, Description: "embedded etcd in " + filepath.Join(cfg.DataDir, "etcd"),
			Endpoints: e.Endpoints(), CAFile: cfg.EmbeddedTLS.CAFile, CertFile: cfg.EmbeddedTLS.ClientCertFile, KeyFile: cfg.EmbeddedTLS.ClientKeyFile,
			stop: cancel, done: done,
		}, nil
	case ExternalEtcd:
		endpoints := strings.Split(cfg.Endpoint, ",")
		if err := checkEtcd(ctx, endpoints, cfg); err != nil {
			return nil, err
		}
		return &Datastore{
			Kind: kind, Description: "etcd at " + Redact(cfg.Endpoint),
			Endpoints: endpoints, CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile,
		}, nil
	}
	return nil, fmt.Errorf("datastore endpoint %q: unsupported", Redact(cfg.Endpoint))
}

// KindOf classifies an endpoint, rejecting malformed ones.
func KindOf(endpoint string) (Kind, error) {
	switch {
	case endpoint == "":
		return SQLite, nil
	case endpoint == "etcd":
		return EmbeddedEtcd, nil
	}
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok {
		return "", fmt.Errorf("datastore endpoint %q is malformed: want \"\", \"etcd\", http(s)://host:port[,…], postgres://…, mysql://… or sqlite://path", Redact(endpoint))
	}
	switch scheme {
	case "http", "https":
		for _, e := range strings.Split(endpoint, ",") {
			u, err := url.Parse(e)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return "", fmt.Errorf("datastore endpoint %q is malformed: %q is not an http(s)://host:port etcd URL", Redact(endpoint), Redact(e))
			}
		}
		return ExternalEtcd, nil
	case "postgres", "postgresql":
		if _, err := url.Parse(endpoint); err != nil {
			return "", fmt.Errorf("datastore endpoint %q is malformed: %v", Redact(endpoint), err)
		}
		return Postgres, nil
	case "mysql":
		return MySQL, nil
	case "sqlite":
		if strings.TrimPrefix(endpoint, "sqlite://") == "" {
			return "", fmt.Errorf("datastore endpoint %q is malformed: sqlite://<path> needs a path", endpoint)
		}
		return SQLite, nil
	}
	return "", fmt.Errorf("datastore endpoint %q: unsupported scheme %q", Redact(endpoint), scheme)
}

func startKine(ctx context.Context, cfg Config, kind Kind, endpoint, description string) (*Datastore, error) {
	sctx, cancel := context.WithCancel(context.Background())
	k, err := kine.Listen(sctx, kine.Config{
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
	return &Datastore{Kind: kind, Description: description, Endpoints: k.Endpoints, stop: stop, done: done}, nil
}

// preflightTCP fails fast when a SQL server cannot be reached at all; kine
// itself retries for minutes.
func preflightTCP(ctx context.Context, endpoint string, kind Kind) error {
	host := hostPort(endpoint, kind)
	if host == "" {
		return nil
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("datastore %q is unreachable: %v", Redact(endpoint), err)
	}
	return conn.Close()
}

func hostPort(endpoint string, kind Kind) string {
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

func checkEtcd(ctx context.Context, endpoints []string, cfg Config) error {
	tlsInfo := transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.CAFile}
	clientCfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second}
	if cfg.CAFile != "" || cfg.CertFile != "" {
		tlsConfig, err := tlsInfo.ClientConfig()
		if err != nil {
			return fmt.Errorf("datastore %q: client TLS: %v", Redact(strings.Join(endpoints, ",")), err)
		}
		clientCfg.TLS = tlsConfig
	}
	client, err := clientv3.New(clientCfg)
	if err != nil {
		return fmt.Errorf("datastore %q is unreachable: %v", Redact(strings.Join(endpoints, ",")), err)
	}
	defer client.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var lastErr error
	for _, ep := range endpoints {
		if _, err := client.Status(cctx, ep); err == nil {
			return nil
		} else {
			lastErr = err
		}
	}
	return fmt.Errorf("datastore %q is unreachable: %v", Redact(strings.Join(endpoints, ",")), lastErr)
}

// Redact hides the password of an endpoint URL so it can be logged.
func Redact(endpoint string) string {
	scheme, rest, ok := strings.Cut(endpoint, "://")
	if !ok {
		return endpoint
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return endpoint
	}
	user, _, hasPassword := strings.Cut(userinfo, ":")
	if !hasPassword {
		return endpoint
	}
	return scheme + "://" + user + ":***@" + host
}
