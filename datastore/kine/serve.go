package kine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/k3s-io/kine/pkg/drivers"
	"github.com/k3s-io/kine/pkg/metrics"
	"github.com/k3s-io/kine/pkg/server"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"

	// The SQL backends kplane serves, each registered with kine's driver
	// registry by its package; SQLite is kplane's (datastore/sqlite).
	// kine's endpoint package is not used: it links every backend kine has
	// (NATS, t4 on Pebble and S3), about 7 MB of binary no endpoint of
	// kplane's reaches.
	_ "github.com/k3s-io/kine/pkg/drivers/mysql"
	_ "github.com/k3s-io/kine/pkg/drivers/pgsql"
)

// gracefulStopTimeout bounds how long kine's gRPC server waits for open
// calls once its context ends (kine's own figure).
const gracefulStopTimeout = 2 * time.Second

// serveConfig is what serve needs to run kine.
type serveConfig struct {
	// Driver configures the SQL backend, named by Driver.Endpoint.
	Driver drivers.Config
	// Listener is unix://<path> or tcp://<host:port>.
	Listener string
	// NotifyInterval and EmulatedEtcdVersion are kine server settings.
	NotifyInterval      time.Duration
	EmulatedEtcdVersion string
	// WaitGroup is done once kine and its database are closed.
	WaitGroup *sync.WaitGroup
}

// served is what serve started: the endpoint etcd clients connect to, and
// the API served there, for clients in the process.
type served struct {
	endpoint string
	api      etcdAPI
}

// serve starts the SQL backend that cfg names and serves the etcd API over
// it on grpcServer, until ctx ends.
func serve(ctx context.Context, cfg serveConfig, grpcServer *grpc.Server) (_ served, err error) {
	bctx, bcancel := context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			bcancel()
		}
	}()
	driverCfg := cfg.Driver
	_, backend, err := drivers.New(bctx, cfg.WaitGroup, &driverCfg)
	if err != nil {
		// The endpoint may hold credentials: say which kind failed only.
		return served{}, fmt.Errorf("creating the %s backend: %w", schemeOf(cfg.Driver.Endpoint), err)
	}
	if backend == nil {
		return served{}, fmt.Errorf("%s is not a SQL backend", schemeOf(cfg.Driver.Endpoint))
	}
	if cfg.Driver.MetricsRegisterer != nil {
		cfg.Driver.MetricsRegisterer.MustRegister(metrics.SQLTotal, metrics.SQLTime, metrics.CompactTotal, metrics.InsertErrorsTotal)
	}
	if err := backend.Start(bctx); err != nil {
		return served{}, fmt.Errorf("starting the %s backend: %w", schemeOf(cfg.Driver.Endpoint), err)
	}
	scheme, address, _ := strings.Cut(cfg.Listener, "://")
	if scheme != "unix" {
		scheme = "http"
	}
	api := newEtcdAPI(server.New(answeredCreates{backend}, scheme, cfg.NotifyInterval, cfg.EmulatedEtcdVersion), backend)
	register(grpcServer, api)
	listener, err := openListener(bctx, cfg.Listener)
	if err != nil {
		return served{}, err
	}
	go func() {
		<-ctx.Done()
		timer := time.AfterFunc(gracefulStopTimeout, grpcServer.Stop)
		defer timer.Stop()
		grpcServer.GracefulStop()
		bcancel()
	}()
	cfg.WaitGroup.Go(func() {
		if err := grpcServer.Serve(listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			logrus.WithError(err).Error("kine's gRPC server stopped")
		}
	})
	if scheme == "unix" {
		return served{endpoint: "unix://" + address, api: api}, nil
	}
	_, port, err := net.SplitHostPort(listener.Addr().String())
	if err != nil {
		return served{}, fmt.Errorf("kine's listener address %s: %w", listener.Addr(), err)
	}
	return served{endpoint: "http://127.0.0.1:" + port, api: api}, nil
}

// openListener opens kine's listener: a unix socket only its owner may use
// (a stale one from a killed process is replaced), or loopback TCP.
func openListener(ctx context.Context, listener string) (net.Listener, error) {
	scheme, address, _ := strings.Cut(listener, "://")
	var lc net.ListenConfig
	if scheme != "unix" {
		l, err := lc.Listen(ctx, "tcp", address)
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", address, err)
		}
		return l, nil
	}
	if err := os.Remove(address); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("removing the stale socket %s: %w", address, err)
	}
	l, err := lc.Listen(ctx, "unix", address)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", address, err)
	}
	if err := os.Chmod(address, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("restricting %s to its owner: %w", address, err)
	}
	return l, nil
}

// schemeOf is the scheme of a kine endpoint, which names its backend
// without the credentials the rest may hold.
func schemeOf(endpoint string) string {
	scheme, _, _ := strings.Cut(endpoint, "://")
	return scheme
}
