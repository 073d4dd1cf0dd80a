// Command kplane runs thousands of isolated Kubernetes control planes in one
// process. See README.md.
package main

import (
	"context"
	"flag"
	"strconv"

	"fmt"
	"k8s.io/klog/v2"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"kplane.dev/kplane/server"
	kplanecli "kplane.dev/kplane/server/cli"
	"kplane.dev/kplane/server/version"
)

func main() {
	app := &cli.App{
		Name:    "kplane",
		Usage:   "thousands of isolated Kubernetes control planes in one process",
		Version: version.Version,
		Commands: []*cli.Command{
			serverCommand(),
			kplanecli.KubeconfigCommand(),
			kplanecli.PlanesCommand(),
			kplanecli.SnapshotCommand(),
		},
	}
	cli.VersionPrinter = func(*cli.Context) { fmt.Println(version.String()) }
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "kplane:", err)
		os.Exit(1)
	}
}

func serverCommand() *cli.Command {
	o := server.NewOptions()
	var logLevel string
	var klogVerbosity int
	return &cli.Command{
		Name:  "server",
		Usage: "run the datastore and the multi-plane apiserver",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Value: o.DataDir, Destination: &o.DataDir, EnvVars: []string{"KPLANE_DATA_DIR"},
				Usage: "directory for the datastore, credentials and kubeconfigs"},
			&cli.StringFlag{Name: "bind-address", Value: o.BindAddress, Destination: &o.BindAddress, EnvVars: []string{"KPLANE_BIND_ADDRESS"},
				Usage: "address the apiserver listens on"},
			&cli.IntFlag{Name: "https-port", Value: o.HTTPSPort, Destination: &o.HTTPSPort, EnvVars: []string{"KPLANE_HTTPS_PORT"},
				Usage: "port the apiserver listens on"},
			&cli.StringSliceFlag{Name: "tls-san", EnvVars: []string{"KPLANE_TLS_SAN"},
				Usage: "extra host name or IP for the serving certificate (repeatable)"},
			&cli.StringFlag{Name: "token-file", Destination: &o.TokenFile, EnvVars: []string{"KPLANE_TOKEN_FILE"},
				Usage: "static token file (token,user,uid,\"groups\"); default <data-dir>/tokens.csv, generated with an admin token on first start"},
			&cli.StringFlag{Name: "datastore-endpoint", Destination: &o.DatastoreEndpoint, EnvVars: []string{"KPLANE_DATASTORE_ENDPOINT"},
				Usage: "\"\" (SQLite in the data dir), \"etcd\" (embedded), http(s)://host:2379[,…] (external etcd), postgres://…, mysql://…"},
			&cli.StringFlag{Name: "datastore-cafile", Destination: &o.DatastoreCAFile, EnvVars: []string{"KPLANE_DATASTORE_CAFILE"},
				Usage: "CA bundle to verify an external datastore"},
			&cli.StringFlag{Name: "datastore-certfile", Destination: &o.DatastoreCertFile, EnvVars: []string{"KPLANE_DATASTORE_CERTFILE"},
				Usage: "client certificate for an external datastore"},
			&cli.StringFlag{Name: "datastore-keyfile", Destination: &o.DatastoreKeyFile, EnvVars: []string{"KPLANE_DATASTORE_KEYFILE"},
				Usage: "client key for an external datastore"},
			&cli.StringFlag{Name: "service-cidr", Value: o.ServiceCIDR, Destination: &o.ServiceCIDR, EnvVars: []string{"KPLANE_SERVICE_CIDR"},
				Usage: "range every plane allocates Service ClusterIPs from"},
			&cli.StringFlag{Name: "service-node-port-range", Value: o.NodePortRange, Destination: &o.NodePortRange, EnvVars: []string{"KPLANE_SERVICE_NODE_PORT_RANGE"},
				Usage: "range every plane allocates NodePorts from"},
			&cli.StringFlag{Name: "log-level", Value: "info", Destination: &logLevel, EnvVars: []string{"KPLANE_LOG_LEVEL"},
				Usage: "debug, info, warn or error"},
			&cli.IntFlag{Name: "max-planes", Destination: &o.MaxPlanes, EnvVars: []string{"KPLANE_MAX_PLANES"},
				Usage: "the most planes the server holds (0: no limit)"},
			&cli.StringFlag{Name: "plane-bootstrap", Value: o.PlaneBootstrap, Destination: &o.PlaneBootstrap, EnvVars: []string{"KPLANE_PLANE_BOOTSTRAP"},
				Usage: "RBAC a new plane starts with: minimal (cluster-admin, admin, edit, view, discovery roles) or full (the upstream bootstrap policy)"},
			&cli.BoolFlag{Name: "enable-profiling", Destination: &o.EnableProfiling, EnvVars: []string{"KPLANE_ENABLE_PROFILING"},
				Usage: "serve /debug/pprof on the root plane (admin credentials only)"},
			&cli.BoolFlag{Name: "disable-controllers", Destination: &o.DisableControllers, EnvVars: []string{"KPLANE_DISABLE_CONTROLLERS"},
				Usage: "run no generic controllers (namespace deletion, garbage collection, default service accounts): planes are API and storage only"},
			&cli.IntFlag{Name: "v", Value: 0, Destination: &klogVerbosity, EnvVars: []string{"KPLANE_V"},
				Usage: "verbosity of the Kubernetes components' logs (klog -v)"},
		},
		Action: func(c *cli.Context) error {
			o.TLSSANs = c.StringSlice("tls-san")
			if err := setupLogging(logLevel, klogVerbosity); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runServer(ctx, o)
		},
	}
}

func runServer(ctx context.Context, o *server.Options) error {
	config, err := o.Config()
	if err != nil {
		return err
	}
	completed, err := config.Complete()
	if err != nil {
		return err
	}
	s, err := completed.New(ctx)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

func setupLogging(level string, verbosity int) error {
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return fmt.Errorf("--log-level %q: %w", level, err)
	}
	logrus.SetLevel(lvl)
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs.Set("v", strconv.Itoa(verbosity))
}
