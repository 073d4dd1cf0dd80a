package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Binary is the kplane binary under test ($KPLANE_BINARY, built by make).
func Binary() (string, error) {
	if b := os.Getenv("KPLANE_BINARY"); b != "" {
		return b, nil
	}
	return "", fmt.Errorf("KPLANE_BINARY is not set; run the e2e tests through 'make test'")
}

// Server is one running kplane process.
type Server struct {
	DataDir string
	Port    int
	Args    []string
	URL     string
	binary  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
	logFile *os.File
	ca      []byte
	token   string
	// lastExit is the exit status of the process Stop or Kill ended.
	lastExit int
}

// Options configure StartServer.
type Options struct {
	// DataDir reuses a data directory (restart); default: a new temp dir.
	DataDir string
	// Port reuses a port (restart); default: a free port.
	Port int
	// PortFlags are flags (such as --etcd-peer-port) that each take a
	// free port, picked again with the server's own when a start fails on
	// "address already in use"; the ports chosen end up in Server.Args,
	// so a restart keeps them.
	PortFlags []string
	// Args are extra `kplane server` flags.
	Args []string
	// Binary runs this kplane binary instead of $KPLANE_BINARY (an
	// installed copy).
	Binary string
}

// StartServer starts kplane and waits until /readyz answers ok. The server
// is stopped when tb ends.
func StartServer(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := Start(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			s.DumpLog(tb, 400)
		}
		s.Stop()
		// A data dir made here goes with a passed test (a full e2e run
		// made hundreds, gigabytes on a developer's disk); a failed one
		// keeps it to look at.
		if opts.DataDir == "" && !tb.Failed() {
			os.RemoveAll(s.DataDir)
		}
	})
	return s
}

// Start starts kplane without a testing.TB (for TestMain).
func Start(opts Options) (*Server, error) {
	dir := opts.DataDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "kplane-e2e-"); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		port := opts.Port
		if port == 0 {
			var err error
			if port, err = FreePort(); err != nil {
				return nil, err
			}
		}
		args, err := withFreePorts(opts.Args, opts.PortFlags)
		if err != nil {
			return nil, err
		}
		s := &Server{DataDir: dir, Port: port, Args: args, URL: fmt.Sprintf("https://127.0.0.1:%d", port), binary: opts.Binary}
		err = s.start()
		if err == nil {
			return s, nil
		}
		// A free port can be taken by another process before the server
		// binds it: pick others.
		if (opts.Port != 0 && len(opts.PortFlags) == 0) || attempt == 3 || !strings.Contains(s.Log(), "address already in use") {
			return s, err
		}
		s.Stop()
	}
}

// withFreePorts is args followed by each of flags with a free port.
func withFreePorts(args, flags []string) ([]string, error) {
	out := slices.Clone(args)
	for _, flag := range flags {
		port, err := FreePort()
		if err != nil {
			return nil, fmt.Errorf("a port for %s: %w", flag, err)
		}
		out = append(out, flag, strconv.Itoa(port))
	}
	return out, nil
}

func (s *Server) start() error {
	bin := s.binary
	if bin == "" {
		var err error
		if bin, err = Binary(); err != nil {
			return err
		}
	}
	s.logPath = filepath.Join(s.DataDir, "server.log")
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args := append([]string{"server", "--data-dir", s.DataDir, "--bind-address", "127.0.0.1",
		"--https-port", strconv.Itoa(s.Port)}, s.Args...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The server must not outlive the test binary, whatever happens to it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.logFile = cmd, exited, logFile
	s.mu.Unlock()
	if err := s.WaitReady(90 * time.Second); err != nil {
		return fmt.Errorf("%w\n--- server log ---\n%s", err, s.tail(40))
	}
	return nil
}

// WaitReady polls /readyz until it answers ok.
func (s *Server) WaitReady(timeout time.Duration) error {
	err := WaitFor(context.Background(), timeout, func(context.Context) error {
		select {
		case <-s.exitedCh():
			return Stop(fmt.Errorf("kplane exited before becoming ready"))
		default:
		}
		if s.ca == nil {
			s.loadCredentials()
		}
		if s.ca == nil {
			return fmt.Errorf("no admin kubeconfig in %s yet", s.DataDir)
		}
		resp, err := s.HTTPClient().Get(s.URL + "/readyz")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "ok" {
			return fmt.Errorf("/readyz: %d %s", resp.StatusCode, body)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kplane not ready: %w", err)
	}
	return nil
}

func (s *Server) exitedCh() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited
}

func (s *Server) loadCredentials() {
	cfg, err := clientcmd.LoadFromFile(s.KubeconfigPath())
	if err != nil {
		return
	}
	for _, c := range cfg.Clusters {
		s.ca = c.CertificateAuthorityData
	}
	for _, a := range cfg.AuthInfos {
		s.token = a.Token
	}
}

// KubeconfigPath is the admin kubeconfig the server wrote.
func (s *Server) KubeconfigPath() string { return filepath.Join(s.DataDir, "admin.kubeconfig") }

// AdminToken is the admin bearer token.
func (s *Server) AdminToken() string { return s.token }

// CAPEM is the server's CA certificate.
func (s *Server) CAPEM() []byte { return s.ca }

// HTTPClient trusts the server's CA and sends no credentials.
func (s *Server) HTTPClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca)
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
}

// PlaneURL is the base URL of plane ("root" for the bare paths).
func (s *Server) PlaneURL(plane string) string {
	if plane == "root" {
		return s.URL
	}
	return s.URL + "/clusters/" + plane + "/control-plane"
}

// RESTConfig is an admin client config for plane.
func (s *Server) RESTConfig(plane string) *rest.Config {
	return &rest.Config{
		Host:            s.PlaneURL(plane),
		BearerToken:     s.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.ca},
		QPS:             -1,
		Timeout:         60 * time.Second,
	}
}

// Client is an admin clientset for plane.
func (s *Server) Client(tb testing.TB, plane string) *kubernetes.Clientset {
	tb.Helper()
	c, err := kubernetes.NewForConfig(s.RESTConfig(plane))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// Dynamic is an admin dynamic client for plane.
func (s *Server) Dynamic(tb testing.TB, plane string) dynamic.Interface {
	tb.Helper()
	c, err := dynamic.NewForConfig(s.RESTConfig(plane))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// Kubeconfig writes a kubeconfig for plane with `kplane kubeconfig` and
// returns its path.
func (s *Server) Kubeconfig(tb testing.TB, plane string) string {
	tb.Helper()
	bin, _ := Binary()
	out, err := exec.Command(bin, "kubeconfig", "--data-dir", s.DataDir, plane).Output()
	if err != nil {
		tb.Fatalf("kplane kubeconfig %s: %v", plane, err)
	}
	path := filepath.Join(tb.TempDir(), plane+".kubeconfig")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// Kubectl runs kubectl against plane and returns its combined output.
func (s *Server) Kubectl(tb testing.TB, plane string, stdin string, args ...string) (string, error) {
	tb.Helper()
	kubeconfig := s.Kubeconfig(tb, plane)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// MustKubectl is Kubectl that fails the test on error.
func (s *Server) MustKubectl(tb testing.TB, plane, stdin string, args ...string) string {
	tb.Helper()
	out, err := s.Kubectl(tb, plane, stdin, args...)
	if err != nil {
		tb.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Stop sends SIGTERM and waits for a clean exit (SIGKILL after 30s).
func (s *Server) Stop() {
	s.signal(syscall.SIGTERM, 30*time.Second)
}

// Kill sends SIGKILL, as a crash would.
func (s *Server) Kill() {
	s.signal(syscall.SIGKILL, 10*time.Second)
}

// Pause stops the process without ending it (SIGSTOP), as a machine that
// hangs or a network that partitions it would; Resume lets it go on.
func (s *Server) Pause(tb testing.TB) { s.send(tb, syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume(tb testing.TB) { s.send(tb, syscall.SIGCONT) }

func (s *Server) send(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		tb.Fatalf("server on port %d is not running", s.Port)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("%v to the server on port %d: %v", sig, s.Port, err)
	}
}

func (s *Server) signal(sig syscall.Signal, wait time.Duration) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
	default:
		_ = cmd.Process.Signal(sig)
		select {
		case <-exited:
		case <-time.After(wait):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	s.mu.Lock()
	if s.logFile != nil {
		s.logFile.Close()
		s.logFile = nil
	}
	if cmd.ProcessState != nil {
		s.lastExit = cmd.ProcessState.ExitCode()
	}
	s.cmd = nil
	s.mu.Unlock()
}

// ExitCode is the exit status of a server that exited or was stopped (-1
// while it runs).
func (s *Server) ExitCode() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return s.lastExit
	}
	if s.cmd.ProcessState == nil {
		return -1
	}
	return s.cmd.ProcessState.ExitCode()
}

// Restart starts the server again on the same data dir and port.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.start(); err != nil {
		tb.Fatal(err)
	}
}

// Log returns the server log so far.
func (s *Server) Log() string {
	data, _ := os.ReadFile(s.logPath)
	return string(data)
}

func (s *Server) tail(n int) string {
	lines := strings.Split(strings.TrimRight(s.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// DumpLog prints the last n lines of the server log to the test output.
func (s *Server) DumpLog(tb testing.TB, n int) {
	tb.Logf("--- last %d lines of %s ---\n%s", n, s.logPath, s.tail(n))
}

// Cleanup removes the data dir of a server started with Start.
func (s *Server) Cleanup() {
	s.Stop()
	os.RemoveAll(s.DataDir)
}

// lowestPort is the lowest port FreePort hands out: above the ports
// services are usually configured on.
const lowestPort = 10000

// FreePort returns a free loopback TCP port below the kernel's ephemeral
// range. A port from that range (what binding port 0 gives) can be taken
// by any client's outgoing connection before the server binds it: a
// cluster test failed on "address already in use" three times in a row
// with such a peer port while the other tests ran their clients.
func FreePort() (int, error) {
	highest := ephemeralLow() - 1
	if highest-lowestPort < 1000 {
		return anyFreePort()
	}
	for range 100 {
		port := lowestPort + rand.IntN(highest-lowestPort+1)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return anyFreePort()
}

// ephemeralLow is the lowest port the kernel gives outgoing connections
// (Linux's default when it cannot be read).
func ephemeralLow() int {
	const linuxDefault = 32768
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return linuxDefault
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return linuxDefault
	}
	return low
}

// anyFreePort is a free port picked by the kernel.
func anyFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// problemLine matches a server log line at level warning or above and
// captures its message.
var problemLine = regexp.MustCompile(`level=(?:warning|error|fatal|panic) msg="((?:[^"\\]|\\.)*)"`)

// DistinctProblems returns the warning and error lines of a server log,
// the first of each message only, followed by how often it came, at most
// limit bytes.
func DistinctProblems(log string, limit int) string {
	type problem struct {
		line  string
		count int
	}
	byMessage := map[string]*problem{}
	var order []*problem
	for _, line := range strings.Split(log, "\n") {
		m := problemLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		p := byMessage[m[1]]
		if p == nil {
			p = &problem{line: line}
			byMessage[m[1]] = p
			order = append(order, p)
		}
		p.count++
	}
	var b strings.Builder
	for i, p := range order {
		entry := p.line
		if p.count > 1 {
			entry = fmt.Sprintf("%s (%d times)", p.line, p.count)
		}
		if b.Len()+len(entry) > limit {
			fmt.Fprintf(&b, "... (%d more distinct messages)\n", len(order)-i)
			break
		}
		b.WriteString(entry + "\n")
	}
	return b.String()
}
