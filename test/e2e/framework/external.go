package framework

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Process is a helper server (etcd, PostgreSQL) a test depends on.
type Process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

func startProcess(tb testing.TB, logPath string, cred *syscall.Credential, name string, args ...string) *Process {
	tb.Helper()
	logFile, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting %s: %v", name, err)
	}
	p := &Process{cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() { cmd.Wait(); logFile.Close(); close(p.exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func waitTCP(tb testing.TB, p *Process, addr string, timeout time.Duration) {
	tb.Helper()
	Eventually(tb, timeout, fmt.Sprintf("%s listening on %s", p.cmd.Path, addr), func(context.Context) error {
		select {
		case <-p.exited:
			data, _ := os.ReadFile(p.log)
			return Stop(fmt.Errorf("%s exited early:\n%s", p.cmd.Path, data))
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// StartEtcd builds the etcd server from the etcd module in go.mod (the
// test/e2e/etcdserver command) and starts a one-member cluster on loopback.
// It returns the client URL.
func StartEtcd(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	bin := filepath.Join(dir, "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "kplane.dev/kplane/test/e2e/etcdserver")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("building etcd: %v\n%s", err, out)
	}
	clientPort, _ := FreePort()
	peerPort, _ := FreePort()
	client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	p := startProcess(tb, filepath.Join(dir, "etcd.log"), nil, bin,
		"--name", "e2e", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "e2e="+peer, "--log-level", "error")
	waitTCP(tb, p, fmt.Sprintf("127.0.0.1:%d", clientPort), time.Minute)
	return client
}

// StartPostgres starts a throw-away PostgreSQL server (Debian's packages)
// in a temp dir and returns a kine endpoint for it. It fails the test with
// a clear message when PostgreSQL is not installed.
func StartPostgres(tb testing.TB) string {
	tb.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var binDir string
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(b, "initdb")); err == nil {
			binDir = b
		}
	}
	Require(tb, binDir != "", "PostgreSQL is not installed (apt-get install postgresql; .ci/run installs it)")
	dir, err := os.MkdirTemp("", "kplane-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	// PostgreSQL refuses to run as root: run it as the postgres user then.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		Require(tb, err == nil, "running as root and there is no postgres user to run PostgreSQL as (Debian's postgresql package creates it)")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(binDir, "initdb"), "-D", data, "-U", "kplane", "--auth=trust", "-E", "UTF8")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	port, _ := FreePort()
	p := startProcess(tb, filepath.Join(dir, "postgres.log"), cred, filepath.Join(binDir, "postgres"),
		"-D", data, "-p", strconv.Itoa(port), "-k", dir, "-h", "127.0.0.1", "-c", "max_connections=200")
	waitTCP(tb, p, fmt.Sprintf("127.0.0.1:%d", port), time.Minute)
	return fmt.Sprintf("postgres://kplane@127.0.0.1:%d/kplane?sslmode=disable", port)
}
