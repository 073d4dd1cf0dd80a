package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/util/cert"
)

type baselineParams struct {
	Instances     int
	KubeAPIServer string
	Etcd          string
	CacheDir      string
	Build         bool
}

// baseline measures the usual model, one upstream kube-apiserver per
// cluster, on this machine: Instances kube-apiservers of the Kubernetes
// release kplane serves, each with its own prefix in one etcd (the etcd
// server of the etcd module kplane embeds). It reports each one's start
// to ready time and resident memory after a forced GC, and etcd's.
//
// etcd is counted in full and shared evenly between the instances: with
// an etcd (or a kine) per instance, as vcluster or kind run, each would
// cost more, so the figure favours the baseline.
func baseline(p baselineParams) (Result, error) {
	kubeAPIServer, etcd, skipped, err := baselineBinaries(p)
	if err != nil {
		return Result{}, err
	}
	if skipped != "" {
		return Result{Scenario: "baseline", Params: map[string]any{"skipped": true},
			Figures: map[string]float64{}, Notes: []string{"SKIPPED: " + skipped}}, nil
	}
	dir, err := os.MkdirTemp("", "kplane-bench-baseline-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)

	etcdProc, etcdURL, err := startEtcd(etcd, filepath.Join(dir, "etcd"))
	if err != nil {
		return Result{}, err
	}
	defer stopProcess(etcdProc)
	const mib = 1 << 20
	figures := map[string]float64{"instances": float64(p.Instances)}
	// etcd allocates its caches in the first moments after it reports
	// healthy.
	time.Sleep(2 * time.Second)
	if figures["etcd_rss_idle_mib"], err = processRSS(etcdProc.Process.Pid); err != nil {
		return Result{}, err
	}
	figures["etcd_rss_idle_mib"] /= mib

	var servers []*server
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	var version string
	var readySum, readyMax float64
	for i := 0; i < p.Instances; i++ {
		s, err := startKubeAPIServer(kubeAPIServer, etcdURL, filepath.Join(dir, fmt.Sprintf("kube-apiserver-%d", i)), i)
		if err != nil {
			return Result{}, err
		}
		servers = append(servers, s)
		figures[fmt.Sprintf("instance_%d_start_to_ready_seconds", i)] = s.ready.Seconds()
		readySum += s.ready.Seconds()
		readyMax = max(readyMax, s.ready.Seconds())
		if version == "" {
			version = s.version()
		}
	}
	var rssSum, rssMin, rssMax, heapSum float64
	for i, s := range servers {
		rss, heap, err := settle(s)
		if err != nil {
			return Result{}, fmt.Errorf("kube-apiserver %d: %w", i, err)
		}
		figures[fmt.Sprintf("instance_%d_rss_mib", i)] = rss / mib
		rssSum += rss
		heapSum += heap
		if i == 0 || rss < rssMin {
			rssMin = rss
		}
		rssMax = max(rssMax, rss)
	}
	etcdRSS, err := processRSS(etcdProc.Process.Pid)
	if err != nil {
		return Result{}, err
	}
	n := float64(p.Instances)
	perInstance := rssSum/n + etcdRSS/n
	figures["start_to_ready_seconds_mean"] = readySum / n
	figures["start_to_ready_seconds_max"] = readyMax
	figures["kube_apiserver_rss_mib_mean"] = rssSum / n / mib
	figures["kube_apiserver_rss_mib_min"] = rssMin / mib
	figures["kube_apiserver_rss_mib_max"] = rssMax / mib
	figures["kube_apiserver_heap_inuse_mib_mean"] = heapSum / n / mib
	figures["etcd_rss_mib"] = etcdRSS / mib
	figures["etcd_share_mib_per_instance"] = etcdRSS / n / mib
	figures["mib_per_plane"] = perInstance / mib
	figures["planes_per_gib"] = (1 << 30) / perInstance
	return Result{
		Scenario: "baseline",
		Params: map[string]any{"instances": p.Instances, "kubeAPIServerVersion": version,
			"datastore": "one etcd, a prefix per instance", "authorization": "RBAC"},
		Figures: figures,
		Notes: []string{
			"Each kube-apiserver is started alone and timed from exec to /readyz ok; memory is read once all run, after two forced GCs (/debug/pprof/heap?gc=1, twice), as for kplane.",
			"mib_per_plane = kube-apiserver RSS + etcd RSS / instances (etcd counted in full, shared evenly; an etcd per instance would cost more).",
		},
	}, nil
}

// baselineBinaries finds kube-apiserver and etcd, building them from the
// modules in go.mod into the cache when they are not there yet. Without
// Build it reports why the baseline is skipped instead.
func baselineBinaries(p baselineParams) (kubeAPIServer, etcd, skipped string, err error) {
	want := []struct {
		path    *string
		flag    string
		module  string
		pkg     string
		name    string
		ldflags func(version string) string
	}{
		{&kubeAPIServer, p.KubeAPIServer, "k8s.io/kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver", func(v string) string {
			minor := strings.Split(strings.TrimPrefix(v, "v"), ".")[1]
			return fmt.Sprintf("-s -w -X k8s.io/component-base/version.gitVersion=%s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=%s -X k8s.io/component-base/version.gitTreeState=clean", v, minor)
		}},
		{&etcd, p.Etcd, "go.etcd.io/etcd/server/v3", "kplane.dev/kplane/test/e2e/etcdserver", "etcd", func(string) string { return "-s -w" }},
	}
	for _, w := range want {
		if w.flag != "" {
			*w.path = w.flag
			continue
		}
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", w.module).Output()
		if err != nil {
			return "", "", "", fmt.Errorf("finding the version of %s (run from the kplane checkout, or pass --%s): %w", w.module, w.name, err)
		}
		version := strings.TrimSpace(string(out))
		bin := filepath.Join(p.CacheDir, w.name+"-"+version)
		*w.path = bin
		if _, err := os.Stat(bin); err == nil {
			continue
		}
		if !p.Build {
			return "", "", fmt.Sprintf("%s is not built yet (%s); a full run (make bench) builds and caches it", w.name, bin), nil
		}
		fmt.Printf("building %s %s into %s (once; it is cached)\n", w.name, version, bin)
		if err := os.MkdirAll(p.CacheDir, 0o755); err != nil {
			return "", "", "", err
		}
		build := exec.Command("go", "build", "-ldflags", w.ldflags(version), "-o", bin+".tmp", w.pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		build.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := build.Run(); err != nil {
			return "", "", "", fmt.Errorf("building %s: %w", w.pkg, err)
		}
		if err := os.Rename(bin+".tmp", bin); err != nil {
			return "", "", "", err
		}
	}
	return kubeAPIServer, etcd, "", nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startEtcd starts a one-member etcd on loopback with its data in dir.
func startEtcd(binary, dir string) (*exec.Cmd, string, error) {
	type started struct {
		cmd *exec.Cmd
		url string
	}
	e, err := onFreePorts(func() (started, error) {
		// A member that failed to bind may have begun its data.
		if err := os.RemoveAll(dir); err != nil {
			return started{}, err
		}
		clientPort, err := freePort()
		if err != nil {
			return started{}, err
		}
		peerPort, err := freePort()
		if err != nil {
			return started{}, err
		}
		cmd, url, err := startEtcdOn(binary, dir, clientPort, peerPort)
		return started{cmd, url}, err
	})
	return e.cmd, e.url, err
}

func startEtcdOn(binary, dir string, clientPort, peerPort int) (*exec.Cmd, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return nil, "", err
	}
	defer log.Close()
	cmd := exec.Command(binary, "--name", "baseline", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "baseline="+peer, "--log-level", "error")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	// A poll that takes long is a port held by something that does not
	// answer: the process is checked again in between.
	poll := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if resp, err := poll.Get(client + "/health"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), `"health":"true"`) {
				return cmd, client, nil
			}
		}
		if exited(cmd.Process.Pid) {
			stopProcess(cmd)
			logged, _ := os.ReadFile(log.Name())
			return nil, "", exitedAtStart(fmt.Sprintf("etcd (log in %s)", log.Name()), string(logged))
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopProcess(cmd)
	return nil, "", fmt.Errorf("etcd not healthy after a minute; log in %s", log.Name())
}

// startKubeAPIServer starts an upstream kube-apiserver on loopback with
// its own prefix in etcd, a serving certificate, a service account key
// and an admin token, and waits until /readyz answers ok.
func startKubeAPIServer(binary, etcdURL, dir string, i int) (*server, error) {
	return onFreePorts(func() (*server, error) { return startKubeAPIServerOnce(binary, etcdURL, dir, i) })
}

func startKubeAPIServerOnce(binary, etcdURL, dir string, i int) (*server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	token := fmt.Sprintf("bench-admin-%d-%d", i, time.Now().UnixNano())
	files := map[string][]byte{
		"serving.crt": certPEM,
		"serving.key": keyPEM,
		"sa.key":      pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		"tokens.csv":  []byte(token + `,bench-admin,bench-admin,"system:masters"` + "\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(binary,
		"--etcd-servers", etcdURL, "--etcd-prefix", fmt.Sprintf("/baseline-%d", i),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "serving.crt"), "--tls-private-key-file", filepath.Join(dir, "serving.key"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC", "--profiling",
		// The endpoint reconciler refuses a loopback address, and there is
		// no one to route the kubernetes Service to here.
		"--endpoint-reconciler-type", "none")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s := &server{cmd: cmd, dir: dir, url: fmt.Sprintf("https://127.0.0.1:%d", port), token: token, ca: certPEM, started: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if s.get("/readyz") == "ok" {
			s.ready = time.Since(s.started)
			return s, nil
		}
		if exited(cmd.Process.Pid) {
			stopProcess(cmd)
			logged, _ := os.ReadFile(log.Name())
			return nil, exitedAtStart(fmt.Sprintf("kube-apiserver %d", i), string(logged))
		}
		time.Sleep(50 * time.Millisecond)
	}
	data, _ := os.ReadFile(log.Name())
	s.stop()
	return nil, fmt.Errorf("kube-apiserver %d not ready: %s", i, tail(string(data), 2000))
}

// get returns the body of an authenticated GET, or "" on any failure.
func (s *server) get(path string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.http().Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return strings.TrimSpace(string(body))
}

// version is the gitVersion the server reports at /version.
func (s *server) version() string {
	body := s.get("/version")
	const key = `"gitVersion": "`
	if i := strings.Index(body, key); i >= 0 {
		rest := body[i+len(key):]
		if j := strings.IndexByte(rest, '"'); j >= 0 {
			return rest[:j]
		}
	}
	return ""
}

func stopProcess(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// exited tells whether a child process has ended (it is a zombie until
// it is waited for).
func exited(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
