package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"

	"kplane.dev/kplane/datastore/driver"
)

// Config configures the embedded etcd.
type Config struct {
	DataDir      string
	TLS          driver.TLS
	StartTimeout time.Duration
	// Member makes it a member of a cluster (nil: alone, peers on loopback).
	Member *driver.Member
}

// PeerCommonName is the common name a member's peer certificate carries:
// peers accept no other certificate of the kplane CA (a serving or client
// certificate stolen from a server is no way into the cluster).
const PeerCommonName = "kplane-etcd-peer"

// Etcd is a running embedded etcd.
type Etcd struct {
	server   *embed.Etcd
	endpoint string
	log      *startLog
}

// Endpoints is the client URL of the member.
func (e *Etcd) Endpoints() []string { return []string{e.endpoint} }

// NewClient implements driver.InProcess: etcd's own in-process client,
// whose calls reach the member as function calls (no TLS, no gRPC, no
// encoding), as kine's in-process client does. Its watches send their
// requests through driver.QueueWatchSends: with the client's own watcher, a
// burst of cancellations stopped every watch of the client for good.
func (e *Etcd) NewClient() *clientv3.Client {
	c := v3client.New(e.server.Server)
	watches := driver.QueueWatchSends(adapter.WatchServerToWatchClient(v3rpc.NewWatchServer(e.server.Server)))
	c.Watcher = blankContextWatcher{clientv3.NewWatchFromWatchClient(watches, c)}
	return c
}

// blankContextWatcher gives the watcher contexts whose String does not
// read their values, as v3client's own watcher does: tracing data among
// them changes unsynchronized, and printing it raced.
type blankContextWatcher struct{ clientv3.Watcher }

func (w blankContextWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	return w.Watcher.Watch(blankContext{ctx}, key, opts...)
}

type blankContext struct{ context.Context }

func (blankContext) String() string { return "(blankCtx)" }

// Close stops the member and closes its database. etcd logs each of its
// listeners closing as an error: those lines are dropped.
func (e *Etcd) Close() {
	e.log.mute()
	e.server.Close()
}

// Start starts the member and returns once it serves requests.
//
// The member's loopback ports are picked free and then bound by etcd: in
// between, another process can take one (CI runs test packages side by
// side). A start that fails on a taken port picks new ports, up to
// portAttempts times; a configured peer port stays as configured.
func Start(ctx context.Context, cfg Config) (*Etcd, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		e, err := start(ctx, cfg)
		if err == nil || attempt == portAttempts || !errors.Is(err, syscall.EADDRINUSE) {
			return e, err
		}
		if err := os.Remove(filepath.Join(cfg.DataDir, "ports")); err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("picking new ports for the embedded etcd: %w", err)
		}
	}
}

const portAttempts = 3

func start(ctx context.Context, cfg Config) (*Etcd, error) {
	ec, err := embedConfig(cfg)
	if err != nil {
		return nil, err
	}
	log := newStartLog(os.Stderr)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(log.logger())
	server, err := embed.StartEtcd(ec)
	if err != nil {
		err = fmt.Errorf("starting embedded etcd: %w", err)
	} else if err = waitReady(ctx, server, cfg); err != nil {
		server.Close()
	}
	if err != nil {
		path := filepath.Join(cfg.DataDir, "start-failure.log")
		if log.keep(path) == nil {
			return nil, fmt.Errorf("%w (etcd's log: %s)", err, path)
		}
		return nil, err
	}
	log.release()
	return &Etcd{server: server, endpoint: ec.AdvertiseClientUrls[0].String(), log: log}, nil
}

// embedConfig is the member's configuration: clients on loopback with
// client-certificate authentication, peers on loopback over plain HTTP
// when alone, or on the member's peer address over mutual TLS in a
// cluster.
func embedConfig(cfg Config) (*embed.Config, error) {
	clientPort, peerPort, err := ports(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	clientURL := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}

	ec := embed.NewConfig()
	ec.Name = "kplane"
	ec.Dir = filepath.Join(cfg.DataDir, "data")
	if m := cfg.Member; m != nil {
		u, err := url.Parse(m.PeerURL())
		if err != nil {
			return nil, fmt.Errorf("embedded etcd peer URL: %w", err)
		}
		ec.Name, peerURL = m.Name, *u
		ec.PeerTLSInfo = transport.TLSInfo{
			CertFile: m.PeerCertFile, KeyFile: m.PeerKeyFile, TrustedCAFile: cfg.TLS.CAFile,
			ClientCertAuth: true, AllowedCNs: []string{PeerCommonName},
		}
	}
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	ec.ListenPeerUrls = []url.URL{peerURL}
	ec.AdvertisePeerUrls = []url.URL{peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	if m := cfg.Member; m != nil && m.InitialCluster != "" && !HasData(cfg.DataDir) {
		ec.InitialCluster, ec.ClusterState = m.InitialCluster, embed.ClusterStateFlagExisting
	}
	ec.ClientTLSInfo.CertFile = cfg.TLS.ServerCertFile
	ec.ClientTLSInfo.KeyFile = cfg.TLS.ServerKeyFile
	ec.ClientTLSInfo.TrustedCAFile = cfg.TLS.CAFile
	ec.ClientTLSInfo.ClientCertAuth = true
	ec.Logger = "zap"
	ec.LogLevel = "error"
	ec.QuotaBackendBytes = 8 << 30
	ec.ListenMetricsUrls = nil
	return ec, nil
}

// HasData reports whether the member in dir (<data-dir>/etcd) has started
// before: it then belongs to the cluster its data names, whatever the
// configuration says.
func HasData(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "data", "member", "wal"))
	return err == nil
}

// waitReady waits until the member serves, fails or stops (a member
// removed from its cluster stops), at most cfg.StartTimeout.
func waitReady(ctx context.Context, server *embed.Etcd, cfg Config) error {
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-server.Server.ReadyNotify():
		return nil
	case err := <-server.Err():
		if stopped(server) {
			return errStopped(cfg)
		}
		return fmt.Errorf("embedded etcd: %w", err)
	case <-server.Server.StopNotify():
		return errStopped(cfg)
	case <-timer.C:
		if cfg.Member != nil {
			return fmt.Errorf("the embedded etcd member %s was not ready after %s: its peers are unreachable or its cluster has lost its quorum", cfg.Member.Name, timeout)
		}
		return fmt.Errorf("embedded etcd not ready after %s", timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopped reports whether the member stopped on its own: the listeners'
// errors that follow are its consequence.
func stopped(server *embed.Etcd) bool {
	select {
	case <-server.Server.StopNotify():
		return true
	case <-time.After(time.Second):
		return false
	}
}

// errStopped is a member that stopped before it served: the usual cause
// is that its peers no longer count it as a member.
func errStopped(cfg Config) error {
	return fmt.Errorf("the embedded etcd member in %s stopped before it was ready: it was probably removed from its cluster (then empty %s and join again with --server)", cfg.DataDir, cfg.DataDir)
}

// ports returns the client and peer ports of the member: picked once, then
// reused from <data-dir>/ports so that the member's advertised URLs stay
// stable across restarts.
func ports(dir string) (int, int, error) {
	path := filepath.Join(dir, "ports")
	if data, err := os.ReadFile(path); err == nil {
		fields := strings.Fields(string(data))
		if len(fields) == 2 {
			c, err1 := strconv.Atoi(fields[0])
			p, err2 := strconv.Atoi(fields[1])
			if err1 == nil && err2 == nil && free(c) && free(p) {
				return c, p, nil
			}
		}
	}
	c, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	p, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%d %d\n", c, p)), 0o600); err != nil {
		return 0, 0, err
	}
	return c, p, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
