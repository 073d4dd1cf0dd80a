package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	utilwait "k8s.io/apimachinery/pkg/util/wait"

	"kplane.dev/kplane/server"
)

// HealthcheckCommand is `kplane healthcheck`: it exits 0 when the local
// server answers ok on /readyz. A container image without a shell or curl
// (scratch, distroless) uses it as its HEALTHCHECK.
func HealthcheckCommand() *cli.Command {
	return &cli.Command{
		Name:  "healthcheck",
		Usage: "exit 0 if the server on this host is ready (GET /readyz), 1 otherwise",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Value: server.DefaultDataDir(), EnvVars: []string{"KPLANE_DATA_DIR"},
				Usage: "data directory of the server (its CA verifies the server)"},
			&cli.IntFlag{Name: "https-port", Value: 6443, EnvVars: []string{"KPLANE_HTTPS_PORT"},
				Usage: "port the server listens on"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, Usage: "give up after this long"},
			&cli.DurationFlag{Name: "wait", Usage: "keep checking a server that is not ready (yet) for up to this long (0: check once)"},
		},
		Action: func(c *cli.Context) error {
			url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Int("https-port"))) + "/readyz"
			caFile := filepath.Join(c.String("data-dir"), "tls", "ca.crt")
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			check := func(ctx context.Context) error { return checkReady(ctx, url, caFile) }
			if c.Duration("wait") > 0 {
				return retryUntilReady(ctx, c.Duration("wait"), check)
			}
			return check(ctx)
		},
	}
}

// retryUntilReady repeats check until it passes or wait (or ctx) runs out, and
// then returns its last error. A container's health check waits this way:
// the runtime runs the first check one interval after start, and a check
// that failed because the server was a moment from ready would leave the
// container unhealthy for another interval.
func retryUntilReady(ctx context.Context, wait time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var last error
	err := utilwait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// checkReady GETs url, trusting only the CA in caFile.
func checkReady(ctx context.Context, url, caFile string) error {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("not ready: reading the server CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("not ready: %s holds no certificate", caFile)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Println(strings.TrimSpace(string(body)))
	return nil
}
