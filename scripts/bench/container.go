package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type containerParams struct {
	Planes int
	// OldBinary, when set, is measured bare as well (old_bare_*).
	OldBinary string
}

// containerScenario measures the container image next to the bare binary,
// started and measured the same way: start→healthy (the image's
// HEALTHCHECK command, `kplane healthcheck`), start→first plane ready (the
// first request to a new plane answered), resident memory idle and with
// Planes planes, and SIGTERM→exit of an idle server, also after a kill -9
// and restart. The image size is compared with the binary's.
//
// Under podman `podman healthcheck run` runs the check (podman schedules
// checks with systemd timers, absent on a machine without systemd); the
// container runs on the host network, as a CI service does with
// --network host.
func containerScenario(binary string, p containerParams) (Result, error) {
	rt, err := containerRuntime()
	if err != nil {
		return Result{}, err
	}
	repo, err := repoRoot()
	if err != nil {
		return Result{}, err
	}
	image := fmt.Sprintf("localhost/kplane-bench:%d", os.Getpid())
	build := exec.Command(filepath.Join(repo, "scripts", "image.sh"), "build", image, runtime.GOARCH, binary)
	build.Env = append(os.Environ(), "CONTAINER_RUNTIME="+rt)
	if out, err := build.CombinedOutput(); err != nil {
		return Result{}, fmt.Errorf("building the image: %v\n%s", err, out)
	}
	defer exec.Command(rt, "rmi", "-f", image).Run()

	figures := map[string]float64{"load_1m_begin": loadAverage()}
	binInfo, err := os.Stat(binary)
	if err != nil {
		return Result{}, err
	}
	out, err := exec.Command(rt, "image", "inspect", "--format", "{{.Size}}", image).Output()
	if err != nil {
		return Result{}, err
	}
	imageSize, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		return Result{}, err
	}
	const mib = 1 << 20
	figures["binary_size_mib"] = float64(binInfo.Size()) / mib
	figures["image_size_mib"] = imageSize / mib
	figures["image_minus_binary_kib"] = (imageSize - float64(binInfo.Size())) / 1024

	targets := []startTarget{&bareTarget{binary: binary}, &containerTarget{runtime: rt, image: image}}
	if p.OldBinary != "" {
		targets = append([]startTarget{&bareTarget{binary: p.OldBinary, checker: binary, label: "old_bare"}}, targets...)
	}
	for _, target := range targets {
		if err := measureTarget(target, p.Planes, figures); err != nil {
			return Result{}, fmt.Errorf("%s: %w", target.name(), err)
		}
	}
	if err := measureRuntimeStop(&containerTarget{runtime: rt, image: image}, figures); err != nil {
		return Result{}, fmt.Errorf("%s stop: %w", filepath.Base(rt), err)
	}
	figures["load_1m_end"] = loadAverage()
	printContainerTable(figures, p.Planes, p.OldBinary != "")
	return Result{
		Scenario: "container",
		Params:   map[string]any{"planes": p.Planes, "runtime": filepath.Base(rt), "old_binary": p.OldBinary != ""},
		Figures:  figures,
		Notes: []string{
			"bare_* is the binary started directly, container_* the image with --network host and a named volume on /data, old_bare_* the --old-binary started directly",
			"start_to_healthy: until `kplane healthcheck` (the image's HEALTHCHECK) first passes, polled every 50 ms",
			"stop: SIGTERM (sent to the server's process, in the container too) to the process's exit, idle server",
			"stop_after_kill: the same for an idle server restarted after kill -9 on the same data",
			"container_runtime_stop: `podman stop` (or docker's) of an idle container, the command's start to its end: SIGTERM, drain and the runtime's own work",
			"load: the 1-minute load average when the scenario began and ended (the machine's other work slows start-up most)",
		},
	}, nil
}

// printContainerTable prints the figures of the targets side by side.
func printContainerTable(f map[string]float64, planes int, old bool) {
	rows := []struct{ label, key, unit string }{
		{"start -> healthy", "start_to_healthy_s", "s"},
		{"start -> first plane ready", "start_to_first_plane_s", "s"},
		{"RSS idle", "rss_idle_mib", "MiB"},
		{fmt.Sprintf("RSS with %d planes", planes), fmt.Sprintf("rss_%d_planes_mib", planes), "MiB"},
		{"SIGTERM -> exit, idle", "stop_s", "s"},
		{"SIGTERM -> exit after kill -9 + restart", "stop_after_kill_s", "s"},
		{"stop command (runtime's stop), idle", "runtime_stop_s", "s"},
	}
	columns := []string{"bare", "container"}
	if old {
		columns = append([]string{"old_bare"}, columns...)
	}
	fmt.Printf("   %-42s", "")
	for _, c := range columns {
		fmt.Printf(" %14s", c)
	}
	fmt.Println()
	for _, r := range rows {
		fmt.Printf("   %-42s", r.label)
		for _, c := range columns {
			cell := "-"
			if v, ok := f[c+"_"+r.key]; ok {
				cell = fmt.Sprintf("%.2f %s", v, r.unit)
			}
			fmt.Printf(" %14s", cell)
		}
		fmt.Println()
	}
	fmt.Printf("   %-42s %.2f at the start, %.2f at the end\n", "load average (1 min)", f["load_1m_begin"], f["load_1m_end"])
	fmt.Printf("   %-42s %10.2f MiB %8.2f MiB (image - binary: %.1f KiB)\n", "binary | image size",
		f["binary_size_mib"], f["image_size_mib"], f["image_minus_binary_kib"])
}

// loadAverage is the machine's 1-minute load average (0 if unknown): the
// start-up figures depend on it more than on anything else.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 0
	}
	load, _ := strconv.ParseFloat(fields[0], 64)
	return load
}

// repoRoot is the directory holding go.mod, above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s: run the bench from the repository", dir)
		}
		dir = parent
	}
}

// startTarget is a kplane started one way (bare or in a container).
type startTarget interface {
	name() string
	start(port int, token string) error
	healthy() error
	pid() (int, error)
	kill() error
	restart() error
	// stop sends SIGTERM and returns the exit code and how long the
	// process took to exit after the signal.
	stop() (int, time.Duration, error)
	cleanup()
}

// measureTarget records <name>_start_to_healthy_s, _start_to_first_plane_s,
// _rss_idle_mib, _rss_<n>_planes_mib, _stop_s and _stop_after_kill_s.
func measureTarget(t startTarget, planes int, figures map[string]float64) error {
	defer t.cleanup()
	port, err := freePort()
	if err != nil {
		return err
	}
	token, err := randomHex(32)
	if err != nil {
		return err
	}
	api := newAPIProbe(port, token)
	began := time.Now()
	if err := t.start(port, token); err != nil {
		return err
	}
	if err := poll(2*time.Minute, t.healthy); err != nil {
		return fmt.Errorf("not healthy: %w", err)
	}
	figures[t.name()+"_start_to_healthy_s"] = time.Since(began).Seconds()
	if err := poll(2*time.Minute, func() error { return api.planeReady("first") }); err != nil {
		return fmt.Errorf("first plane: %w", err)
	}
	figures[t.name()+"_start_to_first_plane_s"] = time.Since(began).Seconds()

	if err := recordRSS(t, figures, t.name()+"_rss_idle_mib"); err != nil {
		return err
	}
	for i := 0; i < planes; i++ {
		if err := poll(time.Minute, func() error { return api.planeReady(fmt.Sprintf("p-%d", i)) }); err != nil {
			return err
		}
	}
	if err := recordRSS(t, figures, fmt.Sprintf("%s_rss_%d_planes_mib", t.name(), planes)); err != nil {
		return err
	}

	code, took, err := t.stop()
	if err != nil || code != 0 {
		return fmt.Errorf("stop: exit code %d, %v", code, err)
	}
	figures[t.name()+"_stop_s"] = took.Seconds()

	if err := t.restart(); err != nil {
		return err
	}
	if err := poll(2*time.Minute, t.healthy); err != nil {
		return fmt.Errorf("not healthy after restart: %w", err)
	}
	if err := t.kill(); err != nil {
		return err
	}
	if err := t.restart(); err != nil {
		return err
	}
	if err := poll(2*time.Minute, t.healthy); err != nil {
		return fmt.Errorf("not healthy after kill and restart: %w", err)
	}
	code, took, err = t.stop()
	if err != nil || code != 0 {
		return fmt.Errorf("stop after kill -9 and restart: exit code %d, %v", code, err)
	}
	figures[t.name()+"_stop_after_kill_s"] = took.Seconds()
	return nil
}

// measureRuntimeStop records container_runtime_stop_s: `<runtime> stop`
// of an idle container, start to end of the command.
func measureRuntimeStop(c *containerTarget, figures map[string]float64) error {
	defer c.cleanup()
	port, err := freePort()
	if err != nil {
		return err
	}
	token, err := randomHex(32)
	if err != nil {
		return err
	}
	if err := c.start(port, token); err != nil {
		return err
	}
	if err := poll(2*time.Minute, c.healthy); err != nil {
		return fmt.Errorf("not healthy: %w", err)
	}
	began := time.Now()
	if code, err := c.runtimeStop(); err != nil || code != 0 {
		return fmt.Errorf("exit code %d, %v", code, err)
	}
	figures["container_runtime_stop_s"] = time.Since(began).Seconds()
	return nil
}

func recordRSS(t startTarget, figures map[string]float64, key string) error {
	pid, err := t.pid()
	if err != nil {
		return err
	}
	rss, err := processRSS(pid)
	if err != nil {
		return err
	}
	figures[key] = rss / (1 << 20)
	return nil
}

// poll calls cond every 50 ms until it succeeds or timeout passes.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// apiProbe asks the server whether a plane serves. It does not verify the
// server's certificate: it measures time to serve on loopback, with the
// same client for both targets, and the CA of a container's data dir is
// inside its volume.
type apiProbe struct {
	url    string
	token  string
	client *http.Client
}

func newAPIProbe(port int, token string) *apiProbe {
	return &apiProbe{url: fmt.Sprintf("https://127.0.0.1:%d", port), token: token, client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // see apiProbe
	}}
}

// planeReady GETs the default namespace of plane: the plane comes into being
// on that first request and answers once it is ready.
func (a *apiProbe) planeReady(plane string) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet,
		a.url+"/clusters/"+plane+"/control-plane/api/v1/namespaces/default", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("plane %s: %s", plane, resp.Status)
	}
	return nil
}

// bareTarget is the binary run directly with a data dir of its own.
type bareTarget struct {
	binary string
	label  string // "bare" unless set
	// checker runs the health check (binary unless set): the old binary's
	// may lack the image's flags.
	checker string
	dir     string
	port    int
	token   string
	cmd     *exec.Cmd
	done    chan struct{}
}

func (b *bareTarget) name() string {
	if b.label != "" {
		return b.label
	}
	return "bare"
}

func (b *bareTarget) start(port int, token string) error {
	dir, err := os.MkdirTemp("", "kplane-bench-bare-")
	if err != nil {
		return err
	}
	b.dir, b.port, b.token = dir, port, token
	return b.restart()
}

func (b *bareTarget) restart() error {
	log, err := os.OpenFile(filepath.Join(b.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(b.binary, "server", "--data-dir", b.dir, "--bind-address", "127.0.0.1",
		"--https-port", strconv.Itoa(b.port), "--admin-token", b.token)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(done) }()
	b.cmd, b.done = cmd, done
	return nil
}

// healthy runs the image's HEALTHCHECK command against the bare server.
func (b *bareTarget) healthy() error {
	checker := b.checker
	if checker == "" {
		checker = b.binary
	}
	return exec.Command(checker, "healthcheck", "--wait", "4s", "--data-dir", b.dir, "--https-port", strconv.Itoa(b.port)).Run()
}

func (b *bareTarget) pid() (int, error) { return b.cmd.Process.Pid, nil }

func (b *bareTarget) kill() error {
	_ = b.cmd.Process.Kill()
	<-b.done
	return nil
}

func (b *bareTarget) stop() (int, time.Duration, error) {
	began := time.Now()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(30 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
		return -1, 0, fmt.Errorf("no exit 30 s after SIGTERM")
	}
	return b.cmd.ProcessState.ExitCode(), time.Since(began), nil
}

func (b *bareTarget) cleanup() {
	if b.cmd != nil && b.cmd.ProcessState == nil {
		_ = b.kill()
	}
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// containerTarget is the image run as a CI service: host network, a named
// volume on /data, KPLANE_TOKEN set.
type containerTarget struct {
	runtime   string
	image     string
	container string
}

func (c *containerTarget) name() string { return "container" }

func (c *containerTarget) rt(args ...string) (string, error) {
	out, err := exec.Command(c.runtime, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", filepath.Base(c.runtime), strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

func (c *containerTarget) start(port int, token string) error {
	c.container = fmt.Sprintf("kplane-bench-%d", os.Getpid())
	_, err := c.rt("run", "-d", "--name", c.container, "--network", "host", "-v", c.container+":/data",
		"-e", "KPLANE_HTTPS_PORT="+strconv.Itoa(port), "-e", "KPLANE_TOKEN="+token, c.image)
	return err
}

func (c *containerTarget) healthy() error {
	if filepath.Base(c.runtime) == "podman" {
		_, err := c.rt("healthcheck", "run", c.container)
		return err
	}
	status, err := c.rt("inspect", "--format", "{{.State.Health.Status}}", c.container)
	if err == nil && status != "healthy" {
		err = fmt.Errorf("health %s", status)
	}
	return err
}

func (c *containerTarget) pid() (int, error) {
	out, err := c.rt("inspect", "--format", "{{.State.Pid}}", c.container)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out)
}

func (c *containerTarget) kill() error {
	_, err := c.rt("kill", "--signal", "KILL", c.container)
	if err != nil {
		return err
	}
	_, err = c.rt("wait", c.container)
	return err
}

func (c *containerTarget) restart() error {
	_, err := c.rt("start", c.container)
	return err
}

// stop sends SIGTERM to the server in the container itself, as the
// runtime's stop does, and returns once that process has exited: the
// server's drain, measured as the bare binary's is. runtimeStop measures
// the runtime's command instead.
func (c *containerTarget) stop() (int, time.Duration, error) {
	pid, err := c.pid()
	if err != nil {
		return -1, 0, err
	}
	began := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return -1, 0, err
	}
	for processExited(pid) != nil {
		if time.Since(began) > 30*time.Second {
			return -1, 0, fmt.Errorf("no exit 30 s after SIGTERM")
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(began)
	if _, err := c.rt("wait", c.container); err != nil {
		return -1, 0, err
	}
	code, err := c.exitCode()
	return code, took, err
}

// runtimeStop is `<runtime> stop` of the container, as a CI job ends its
// service: SIGTERM, the drain, and the runtime's own work before and after.
func (c *containerTarget) runtimeStop() (int, error) {
	if _, err := c.rt("stop", "-t", "30", c.container); err != nil {
		return -1, err
	}
	return c.exitCode()
}

func (c *containerTarget) exitCode() (int, error) {
	out, err := c.rt("inspect", "--format", "{{.State.ExitCode}}", c.container)
	if err != nil {
		return -1, err
	}
	return strconv.Atoi(out)
}

// processExited reports whether pid is gone (or a zombie its parent has
// yet to reap).
func processExited(pid int) error {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	// The state follows the command, which is in parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return nil
	}
	return fmt.Errorf("process %d still running", pid)
}

func (c *containerTarget) cleanup() {
	if c.container == "" {
		return
	}
	_, _ = c.rt("rm", "-f", "-t", "0", c.container)
	_, _ = c.rt("volume", "rm", "-f", c.container)
}

// containerRuntime is podman, else docker.
func containerRuntime() (string, error) {
	if rt := os.Getenv("CONTAINER_RUNTIME"); rt != "" {
		return exec.LookPath(rt)
	}
	for _, rt := range []string{"podman", "docker"} {
		if path, err := exec.LookPath(rt); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("the container scenario needs podman or docker")
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
