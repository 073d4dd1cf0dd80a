// Package etcd runs a single-member etcd inside the kplane process, on
// loopback, with TLS and client-certificate authentication so that no other
// local process can read or write the planes' data.
package etcd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"kplane.dev/kplane/datastore/driver"
)

// Config configures the embedded etcd.
type Config struct {
	DataDir      string
	TLS          driver.TLS
	StartTimeout time.Duration
}

// Etcd is a running embedded etcd.
type Etcd struct {
	server   *embed.Etcd
	endpoint string
}

// Endpoints is the client URL of the member.
func (e *Etcd) Endpoints() []string { return []string{e.endpoint} }

// Close stops the member and closes its database.
func (e *Etcd) Close() { e.server.Close() }

// Start starts the member and returns once it serves requests.
func Start(ctx context.Context, cfg Config) (*Etcd, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	clientPort, peerPort, err := ports(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	clientURL := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}

	ec := embed.NewConfig()
	ec.Name = "kplane"
	ec.Dir = filepath.Join(cfg.DataDir, "data")
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	ec.ListenPeerUrls = []url.URL{peerURL}
	ec.AdvertisePeerUrls = []url.URL{peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ClientTLSInfo.CertFile = cfg.TLS.ServerCertFile
	ec.ClientTLSInfo.KeyFile = cfg.TLS.ServerKeyFile
	ec.ClientTLSInfo.TrustedCAFile = cfg.TLS.CAFile
	ec.ClientTLSInfo.ClientCertAuth = true
	ec.Logger = "zap"
	ec.LogLevel = "error"
	ec.LogOutputs = []string{"stderr"}
	ec.QuotaBackendBytes = 8 << 30
	ec.ListenMetricsUrls = nil

	server, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd: %w", err)
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	select {
	case <-server.Server.ReadyNotify():
	case err := <-server.Err():
		server.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(timeout):
		server.Close()
		return nil, fmt.Errorf("embedded etcd not ready after %s", timeout)
	case <-ctx.Done():
		server.Close()
		return nil, ctx.Err()
	}
	return &Etcd{server: server, endpoint: clientURL.String()}, nil
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
