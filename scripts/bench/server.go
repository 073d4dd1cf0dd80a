package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// server is one kplane process under measurement.
type server struct {
	cmd     *exec.Cmd
	dir     string
	url     string
	token   string
	ca      []byte
	started time.Time
	ready   time.Duration
	// args are the caller's flags, which a restart passes again.
	args []string
}

func startServer(binary string, args ...string) (*server, error) {
	dir, err := os.MkdirTemp("", "kplane-bench-")
	if err != nil {
		return nil, err
	}
	return startServerOnFreePort(binary, dir, args...)
}

// startServerOnFreePort starts kplane on dir and a port that was free a
// moment before (onFreePorts).
func startServerOnFreePort(binary, dir string, args ...string) (*server, error) {
	return onFreePorts(func() (*server, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		return startServerIn(binary, dir, port, args...)
	})
}

// onFreePorts calls start, which starts a process on ports picked free a
// moment before, until it does not fail on a taken port, three times at
// most: another process (CI runs test packages side by side) can take a
// port between the pick and the process's bind.
func onFreePorts[T any](start func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := start()
		if err == nil || attempt == 3 || !errors.Is(err, errPortTaken) {
			return v, err
		}
	}
}

// errPortTaken is a process that exited at start because its port was
// taken.
var errPortTaken = errors.New("the port was taken")

// exitedAtStart is the error of a process (what) that exited before it
// was ready, with the end of what it logged (errPortTaken when it could
// not bind its port).
func exitedAtStart(what, logged string) error {
	err := fmt.Errorf("%s exited before it was ready: %s", what, tail(logged, 2000))
	if strings.Contains(logged, "address already in use") {
		return fmt.Errorf("%w: %w", errPortTaken, err)
	}
	return err
}

// startServerIn starts kplane on dir and port (a restart when dir holds a
// server's data) and waits until it is ready.
func startServerIn(binary, dir string, port int, args ...string) (*server, error) {
	logPath := filepath.Join(dir, "server.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	logStart, err := log.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}
	// Profiling lets the benchmark force a GC before it reads memory.
	cmd := exec.Command(binary, append([]string{"server", "--data-dir", dir, "--bind-address", "127.0.0.1",
		"--https-port", strconv.Itoa(port), "--enable-profiling"}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s := &server{cmd: cmd, dir: dir, url: fmt.Sprintf("https://127.0.0.1:%d", port), started: time.Now(), args: args}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	// One client, polled often: start -> ready is measured to within the
	// interval, and a new connection per poll (a TLS handshake) would take
	// CPU from the server it times.
	var client *http.Client
	for time.Now().Before(deadline) {
		if s.ca == nil {
			if cfg, err := clientcmd.LoadFromFile(filepath.Join(dir, "admin.kubeconfig")); err == nil {
				for _, c := range cfg.Clusters {
					s.ca = c.CertificateAuthorityData
				}
				for _, a := range cfg.AuthInfos {
					s.token = a.Token
				}
			}
		}
		if s.ca != nil && client == nil {
			client = s.http()
			// A poll that takes long is a port held by something that does
			// not answer: the process is checked again in between.
			client.Timeout = 2 * time.Second
		}
		if client != nil {
			if resp, err := client.Get(s.url + "/readyz"); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.TrimSpace(string(body)) == "ok" {
					s.ready = time.Since(s.started)
					return s, nil
				}
			}
		}
		if exited(cmd.Process.Pid) {
			s.terminate() // reaps it; its data dir stays for a retry or a look
			logged, _ := os.ReadFile(logPath)
			return nil, exitedAtStart(fmt.Sprintf("kplane (log in %s)", logPath), string(logged[min(logStart, int64(len(logged))):]))
		}
		time.Sleep(readyPoll)
	}
	s.stop()
	return nil, fmt.Errorf("kplane not ready; log in %s", logPath)
}

// readyPoll is how often a starting server's /readyz is asked.
const readyPoll = 5 * time.Millisecond

func (s *server) http() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca)
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 64}}
}

func (s *server) config(plane string) *rest.Config {
	host := s.url
	if plane != "root" {
		host += "/clusters/" + plane + "/control-plane"
	}
	return &rest.Config{Host: host, BearerToken: s.token, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca},
		QPS: -1, Timeout: 60 * time.Second}
}

func (s *server) client(plane string) (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(s.config(plane))
}

// rssBytes is the resident set of the server process.
func (s *server) rssBytes() (float64, error) {
	return processRSS(s.cmd.Process.Pid)
}

// processRSS is the resident set of a process.
func processRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(fields[1], 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS")
}

// saveMetrics writes the server's /metrics to path: what a profiled run
// compares before and after (requests per verb and resource, queue
// figures).
func (s *server) saveMetrics(path string) error {
	resp, err := s.getMetrics()
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// metric reads one unlabelled gauge from the server's /metrics.
func (s *server) metric(name string) (float64, error) {
	values, err := s.metrics(name)
	return values[name], err
}

// metrics reads the unlabelled series of every one of names from one
// /metrics answer: one scrape, so that the values are of one moment and
// the server answers (and pages in) the scrape once.
func (s *server) metrics(names ...string) (map[string]float64, error) {
	values := make(map[string]float64, len(names))
	err := s.scanMetrics(func(line string) error {
		name, value, ok := strings.Cut(line, " ")
		if !ok || !slices.Contains(names, name) {
			return nil
		}
		if _, seen := values[name]; seen {
			return nil
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		values[name] = v
		return err
	})
	for _, name := range names {
		if _, found := values[name]; !found && err == nil {
			err = fmt.Errorf("metric %s not found", name)
		}
	}
	return values, err
}

// metricSum is the sum of every series of metric name, whatever their
// labels (0 when it has none yet).
func (s *server) metricSum(name string) (float64, error) {
	var sum float64
	err := s.scanMetrics(func(line string) error {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			return nil
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		sum += v
		return err
	})
	return sum, err
}

// scanMetrics calls each with every line of the server's /metrics.
func (s *server) scanMetrics(each func(line string) error) error {
	resp, err := s.getMetrics()
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if err := each(sc.Text()); err != nil {
			return fmt.Errorf("reading /metrics: %w", err)
		}
	}
	return sc.Err()
}

// getMetrics asks the server for its /metrics; the caller closes the body.
func (s *server) getMetrics() (*http.Response, error) {
	req, _ := http.NewRequestWithContext(context.Background(), "GET", s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.http().Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading /metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("reading /metrics: %s", resp.Status)
	}
	return resp, nil
}

// selfCPUSeconds is the CPU time (user and system) this bench process has
// used so far: its clients share the machine's cores with the server.
func selfCPUSeconds() (float64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("reading the bench's own CPU time: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds(), nil
}

// cpuSeconds is the CPU time (user and system) the server has used so far.
// A rollout's wall time on a busy 2-core machine moves by 10 % from run to
// run; the CPU the server spent on it is what a change of the server moves.
func (s *server) cpuSeconds() (float64, error) {
	return processCPUSeconds(s.cmd.Process.Pid)
}

// processCPUSeconds is the CPU time (user and system) process pid has used
// so far, its children's not included.
func processCPUSeconds(pid int) (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command (which is in parentheses): state is the
	// first, utime and stime the 12th and 13th, in clock ticks of 1/100 s.
	i := strings.LastIndexByte(string(stat), ')')
	fields := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(fields) < 13 {
		return 0, fmt.Errorf("reading the CPU time of process %d: %q", pid, stat)
	}
	var ticks float64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
		}
		ticks += n
	}
	return ticks / 100, nil
}

func (s *server) stop() {
	s.terminate()
	os.RemoveAll(s.dir)
}

// terminate stops the process and keeps its data dir.
func (s *server) terminate() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// restart stops the server and starts the same command on the same data
// dir and port; the new server's ready is its start -> ready.
func (s *server) restart() (*server, error) {
	s.terminate()
	var port int
	if _, err := fmt.Sscanf(s.url, "https://127.0.0.1:%d", &port); err != nil {
		return nil, err
	}
	return startServerIn(s.cmd.Path, s.dir, port, s.args...)
}

func memoryGiB() int {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.Atoi(fields[1])
			return (kb + 512*1024) / (1024 * 1024)
		}
	}
	return 0
}

// collectGarbage forces two garbage collections in the server (needs
// --enable-profiling). One is not enough to read what stays live: it moves
// sync.Pools' contents to their victim caches and queues finalizers, and
// both stay reachable until the next collection. With one, a Fleet of
// 1,000 members measured 24.3 KiB per member in one run of six and
// 15.0-16.1 in the others; with two, 14.4-15.4 in all six.
func (s *server) collectGarbage() error {
	for range 2 {
		if err := s.collectGarbageOnce(); err != nil {
			return err
		}
	}
	return nil
}

func (s *server) collectGarbageOnce() error {
	req, _ := http.NewRequest("GET", s.url+"/debug/pprof/heap?gc=1", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("forcing GC: %s", resp.Status)
	}
	return nil
}

// heapProfile saves the server's heap profile (needs --enable-profiling).
func (s *server) heapProfile(path string) error {
	req, _ := http.NewRequest("GET", s.url+"/debug/pprof/heap", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
