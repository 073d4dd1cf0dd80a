package etcd

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

// The kinds of etcd datastore.
const (
	Embedded driver.Kind = "embedded-etcd"
	External driver.Kind = "etcd"
)

// Driver serves "etcd" (a member embedded in the process) and
// http(s)://host:port[,…] (an external cluster).
type Driver struct{}

var _ driver.Driver = Driver{}

// Kind implements driver.Driver.
func (Driver) Kind(endpoint string) (driver.Kind, bool, error) {
	if endpoint == "etcd" {
		return Embedded, true, nil
	}
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return "", false, nil
	}
	for _, e := range strings.Split(endpoint, ",") {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", true, fmt.Errorf("datastore endpoint %q is malformed: %q is not an http(s)://host:port etcd URL",
				driver.Redact(endpoint), driver.Redact(e))
		}
	}
	return External, true, nil
}

// Listen implements driver.Driver: the embedded member runs until the
// datastore is closed; an external cluster is checked to answer.
func (Driver) Listen(ctx context.Context, kind driver.Kind, cfg driver.Config) (*driver.Datastore, error) {
	switch kind {
	case Embedded:
		return startEmbedded(ctx, cfg)
	case External:
		endpoints := strings.Split(cfg.Endpoint, ",")
		if err := checkEtcd(ctx, endpoints, cfg); err != nil {
			return nil, err
		}
		return &driver.Datastore{
			Kind: kind, Description: "etcd at " + driver.Redact(cfg.Endpoint),
			Endpoints: endpoints, CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile,
		}, nil
	}
	return nil, fmt.Errorf("datastore endpoint %q: not an etcd datastore", driver.Redact(cfg.Endpoint))
}

func startEmbedded(ctx context.Context, cfg driver.Config) (*driver.Datastore, error) {
	dir := filepath.Join(cfg.DataDir, "etcd")
	sctx, cancel := context.WithCancel(context.Background())
	e, err := Start(ctx, Config{DataDir: dir, TLS: cfg.EmbeddedTLS, StartTimeout: cfg.StartTimeout, Member: cfg.Member})
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
	description := "embedded etcd in " + dir
	if cfg.Member != nil {
		description = fmt.Sprintf("embedded etcd member %s (peers at %s) in %s", cfg.Member.Name, cfg.Member.PeerURL(), dir)
	}
	return driver.Embedded(driver.Datastore{
		Kind: Embedded, Description: description,
		Endpoints: e.Endpoints(), CAFile: cfg.EmbeddedTLS.CAFile, CertFile: cfg.EmbeddedTLS.ClientCertFile, KeyFile: cfg.EmbeddedTLS.ClientKeyFile,
		InProcess: e,
	}, cancel, done), nil
}

func checkEtcd(ctx context.Context, endpoints []string, cfg driver.Config) error {
	if err := dialAny(ctx, endpoints); err != nil {
		return fmt.Errorf("datastore %q is unreachable: %v", driver.Redact(strings.Join(endpoints, ",")), err)
	}
	client, err := driver.NewClient(endpoints, cfg.CAFile, cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return err
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
	return fmt.Errorf("datastore %q is unreachable: %v", driver.Redact(strings.Join(endpoints, ",")), lastErr)
}

// dialAny connects to the endpoints over TCP until one accepts. Nothing
// listening is then one line at once, instead of the gRPC client's
// reconnection attempts logged until its timeout.
func dialAny(ctx context.Context, endpoints []string) error {
	var dialer net.Dialer
	var lastErr error
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil {
			return err
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := dialer.DialContext(dctx, "tcp", u.Host)
		cancel()
		if err == nil {
			return conn.Close()
		}
		lastErr = err
	}
	return lastErr
}
