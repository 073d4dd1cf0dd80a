// Package kine runs kine in-process: an etcd API served over a SQL
// database (SQLite by default, PostgreSQL or MySQL), reachable only through
// a unix socket in the data directory. kine's server and backends serve;
// kplane starts them itself (serve) so that only these three backends are
// linked.
package kine

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/drivers/generic"
	"github.com/k3s-io/kine/pkg/drivers/sqlite"
	"github.com/k3s-io/kine/pkg/tls"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"kplane.dev/kplane/datastore/driver"
	kplanesqlite "kplane.dev/kplane/datastore/sqlite"
)

// Config configures one kine instance.
type Config struct {
	// Endpoint is a kine DSN (sqlite://path?…, postgres://…, mysql://…).
	Endpoint string
	// SocketDir holds kine.sock; the socket is mode 0600.
	SocketDir string
	// Client TLS towards the SQL backend.
	CAFile, CertFile, KeyFile string
	StartTimeout              time.Duration
	// Metrics, when set, receives kine's SQL metrics.
	Metrics prometheus.Registerer
}

// Kine is a running kine.
type Kine struct {
	// Endpoints is the etcd API to connect to.
	Endpoints []string
	// BatchDeletes says the etcd API takes a transaction of deletions,
	// each conditional on its key's revision, and commits it as one
	// write that gives every key a revision of its own (SQLite).
	BatchDeletes bool
	// InProcess makes clients that call the etcd API of Endpoints
	// directly.
	InProcess driver.InProcess
	wg        *sync.WaitGroup
	grpc      *grpc.Server
}

// StopServing closes every connection to kine at once, without kine's
// graceful stop (which waits up to 2 s for open calls). kplane stops the
// datastore only after the apiserver has drained its requests and exited,
// so every acknowledged write is committed; what is still open then are
// watch streams of etcd clients that are being closed themselves, and
// waiting for them only delays the exit of an idle server. Cancel the
// context given to Listen afterwards to close the database.
func (k *Kine) StopServing() { k.grpc.Stop() }

// Wait blocks until kine has stopped (after its context is done) and its
// database is closed.
func (k *Kine) Wait() { k.wg.Wait() }

// SQLiteEndpoint is the kine DSN for a SQLite file at path, with the
// settings kine recommends: WAL journal (a committed write survives the
// process being killed), immediate transactions, a generous busy timeout.
func SQLiteEndpoint(path string) string {
	return "sqlite://" + path + "?" + sqlite.DefaultParams
}

// emulatedEtcdVersion is the etcd version kine reports. It is deliberately
// one the apiserver does not trust with progress notifications (RequestWatchProgress
// needs 3.5.13): kine's notion of its current revision can lag the newest
// row when writes race, and a consistent read that waits for the watch
// cache to reach it would stall. Consistent reads then go to the database;
// resourceVersion=0 reads, watches and snapshots still come from memory.
const emulatedEtcdVersion = "3.5.12"

// maxSocketPath leaves room under the 108-byte sun_path limit.
const maxSocketPath = 100

// Listen starts kine and returns once it serves the etcd API.
func Listen(ctx context.Context, cfg Config) (*Kine, error) {
	return listen(ctx, cfg, grpcServer())
}

// listen starts kine serving the etcd API on server.
func listen(ctx context.Context, cfg Config, server *grpc.Server) (*Kine, error) {
	dsn := cfg.Endpoint
	if path, ok := sqlitePath(cfg.Endpoint); ok {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
		}
		// Served by kplane's SQLite backend: kine's, with its statements
		// kept prepared.
		dsn = kplanesqlite.Scheme + "://" + strings.TrimPrefix(withoutNeedlessVacuum(dsn, path), "sqlite://")
	}
	listener := "unix://" + filepath.Join(cfg.SocketDir, "kine.sock")
	if len(listener) > maxSocketPath {
		// A data dir too deep for a unix socket: fall back to loopback TCP.
		listener = "tcp://127.0.0.1:0"
	}
	wg := &sync.WaitGroup{}
	config := serveConfig{
		Listener:            listener,
		WaitGroup:           wg,
		NotifyInterval:      5 * time.Second,
		EmulatedEtcdVersion: emulatedEtcdVersion,
		Driver: drivers.Config{
			Endpoint:             dsn,
			BackendTLSConfig:     tls.Config{CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile},
			ConnectionPoolConfig: generic.ConnectionPoolConfig{MaxIdle: 20, MaxIdleTime: 2 * time.Minute},
			// kine compacts only when the apiserver asks (its compactor,
			// --etcd-compaction-interval, through the etcd API), and then up
			// to the revision the apiserver saw one interval before: that
			// interval is what keeps the history watch caches and continue
			// tokens need, as on etcd. kine's own guard, never compacting
			// the newest 1,000 revisions, would keep a continue token valid
			// forever on a quiet server (the apiserver writes one revision
			// per interval).
			CompactInterval:   0,
			CompactTimeout:    5 * time.Second,
			CompactMinRetain:  0,
			CompactBatchSize:  1000,
			PollBatchSize:     500,
			PollInterval:      time.Second,
			MetricsRegisterer: cfg.Metrics,
		},
	}

	type result struct {
		served
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := serve(ctx, config, server)
		ch <- result{s, err}
	}()
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		return &Kine{Endpoints: []string{r.endpoint}, BatchDeletes: r.api.batchDeletes, InProcess: r.api, wg: wg, grpc: server}, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("not ready after %s", timeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// grpcServer is the gRPC server kine serves the etcd API on, with the
// limits of an etcd server (keepalive, streams, request size), kplane's own
// so that it can stop it (StopServing). kine serves on a unix socket or
// loopback without TLS. outer intercepts streams before kplane's own
// interceptor does.
func grpcServer(outer ...grpc.StreamServerInterceptor) *grpc.Server {
	return grpc.NewServer(
		grpc.ChainStreamInterceptor(append(outer, endWatchesFirst)...),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: embed.DefaultGRPCKeepAliveMinTime}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: embed.DefaultGRPCKeepAliveInterval, Timeout: embed.DefaultGRPCKeepAliveTimeout,
		}),
		grpc.MaxConcurrentStreams(embed.DefaultMaxConcurrentStreams),
		// A request as large as etcd accepts, plus room for gRPC's framing.
		grpc.MaxRecvMsgSize(int(embed.DefaultMaxRequestBytes)+grpcFramingBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
	)
}

// grpcFramingBytes is headroom over etcd's request limit for gRPC framing.
const grpcFramingBytes = 512 << 10

func sqlitePath(dsn string) (string, bool) {
	const prefix = "sqlite://"
	if len(dsn) <= len(prefix) || dsn[:len(prefix)] != prefix {
		return "", false
	}
	path := dsn[len(prefix):]
	for i := range path {
		if path[i] == '?' {
			return path[:i], true
		}
	}
	return path, true
}
