package kplanetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
)

// process is a kplane server this package started.
type process struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	dataDir string
	logPath string
	url     string
	caPEM   []byte
	token   string
}

// startProcess runs `kplane server` on a free loopback port with its data
// in a new temporary directory and waits until /readyz answers ok.
func startProcess(ctx context.Context, binary string, args []string, timeout time.Duration) (*process, error) {
	dir, err := os.MkdirTemp("", "kplanetest-")
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		p, err := launch(binary, dir, args)
		if err == nil {
			err = p.waitReady(ctx, timeout)
			if err == nil {
				return p, nil
			}
		}
		// A free port can be taken by another process before the server
		// binds it: try another.
		retry := attempt < 3 && p != nil && strings.Contains(p.log(), "address already in use")
		if p != nil {
			err = fmt.Errorf("%w\n--- last lines of %s ---\n%s", err, p.logPath, p.tail(30))
			p.stop()
		}
		if !retry {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("kplanetest: starting %s: %w", binary, err)
		}
	}
}

func launch(binary, dir string, extra []string) (*process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	args := append([]string{"server", "--data-dir", dir, "--bind-address", "127.0.0.1",
		"--https-port", strconv.Itoa(port)}, extra...)
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), dataDir: dir, logPath: logPath,
		url: "https://127.0.0.1:" + strconv.Itoa(port)}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// waitReady waits for the admin kubeconfig the server writes and then for
// /readyz, checked against the CA in that kubeconfig.
func (p *process) waitReady(ctx context.Context, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, errors.New("kplane exited before it was ready")
		default:
		}
		if p.caPEM == nil {
			last = p.loadCredentials()
			return false, nil
		}
		last = readyz(ctx, p.url, p.caPEM)
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return err
}

func (p *process) loadCredentials() error {
	cfg, err := clientcmd.LoadFromFile(filepath.Join(p.dataDir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || cfg.Clusters[ctx.Cluster] == nil || cfg.AuthInfos[ctx.AuthInfo] == nil {
		return fmt.Errorf("admin kubeconfig has no current context yet")
	}
	p.caPEM, p.token = cfg.Clusters[ctx.Cluster].CertificateAuthorityData, cfg.AuthInfos[ctx.AuthInfo].Token
	return nil
}

// stop kills the server and waits for it to exit. Nothing of it is kept
// (its data directory is removed next), so a graceful shutdown, which
// waits for the deletions of the last tests' planes, would only cost time.
func (p *process) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func (p *process) log() string {
	data, _ := os.ReadFile(p.logPath)
	return string(data)
}

func (p *process) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// readyz reports whether server's /readyz answers ok, trusting caPEM.
func readyz(ctx context.Context, server string, caPEM []byte) error {
	client, err := httpClient(caPEM)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func httpClient(caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate in the server's credentials")
	}
	return &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
