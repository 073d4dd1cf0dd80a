package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ContainerRuntime returns the container runtime the image is built and run
// with: podman, else docker with a daemon that answers. Having neither fails
// the test (.ci/run installs podman and runc).
func ContainerRuntime(tb testing.TB) string {
	tb.Helper()
	if path, err := exec.LookPath("podman"); err == nil {
		return path
	}
	if path, err := exec.LookPath("docker"); err == nil {
		out, err := exec.Command(path, "info", "--format", "{{.ServerVersion}}").CombinedOutput()
		Require(tb, err == nil, "docker is installed but its daemon does not answer ("+strings.TrimSpace(string(out))+"); install podman and runc (.ci/run does)")
		return path
	}
	Require(tb, false, "no container runtime: apt-get install podman runc (.ci/run installs them and writes /etc/containers/containers.conf)")
	return ""
}

// IsPodman reports whether runtime is podman.
func IsPodman(runtime string) bool { return filepath.Base(runtime) == "podman" }

// ImageName is the tag the tests build the image under.
const ImageName = "localhost/kplane-e2e:test"

var (
	imageOnce sync.Once
	imageErr  error
)

// BuildImage builds the image of $KPLANE_BINARY with `make image`, as a
// user would, once per test process, and returns its name.
func BuildImage(tb testing.TB, runtime string) string {
	tb.Helper()
	imageOnce.Do(func() { imageErr = buildImage(runtime) })
	if imageErr != nil {
		tb.Fatal(imageErr)
	}
	return ImageName
}

func buildImage(rt string) error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return err
	}
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	name, tag, _ := strings.Cut(ImageName, ":")
	previous := imageID(rt, ImageName)
	cmd := exec.Command("make", "-C", repo, "image", "IMAGE="+name, "IMAGE_TAG="+tag, "IMAGE_BINARY="+bin,
		"CONTAINER_RUNTIME="+rt)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make image: %v\n%s", err, out)
	}
	// The image of an earlier binary is left untagged by this build; it is
	// removed unless a container still uses it.
	if previous != "" && previous != imageID(rt, ImageName) {
		_ = exec.Command(rt, "rmi", previous).Run()
	}
	return nil
}

func imageID(rt, image string) string {
	out, err := exec.Command(rt, "image", "inspect", "--format", "{{.Id}}", image).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// repoRoot is the checkout holding this package (the directory with go.mod).
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
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Container is one kplane container, run as a CI service would run it: on
// the host's network, its data in a named volume.
type Container struct {
	Runtime string
	Name    string
	Volume  string
	Port    int
	URL     string
	// Output and Err are what a container run with Foreground printed and
	// how it exited.
	Output string
	Err    error
}

// ContainerOptions configure RunContainer.
type ContainerOptions struct {
	Image string
	// Volume is the named volume on /data; default: a new one, removed
	// with the container.
	Volume string
	// Env are extra -e NAME=value settings.
	Env []string
	// Args are extra `run` flags (--read-only, --user ...).
	Args []string
	// Foreground runs the container attached and returns once it exits
	// (a container that must fail at start), with Output and Err set.
	Foreground bool
}

var containerSeq struct {
	sync.Mutex
	n int
}

func uniqueName(prefix string) string {
	containerSeq.Lock()
	defer containerSeq.Unlock()
	containerSeq.n++
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), containerSeq.n)
}

// RunContainer starts the image with `run -d --network host` on a free port
// and removes the container (and a volume it made) when tb ends.
func RunContainer(tb testing.TB, rt string, opts ContainerOptions) *Container {
	tb.Helper()
	port, err := FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	c := &Container{Runtime: rt, Name: uniqueName("kplane-e2e"), Volume: opts.Volume, Port: port,
		URL: fmt.Sprintf("https://127.0.0.1:%d", port)}
	if c.Volume == "" {
		c.Volume = c.Name
		tb.Cleanup(func() { _ = exec.Command(rt, "volume", "rm", "-f", c.Volume).Run() })
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("--- log of container %s ---\n%s", c.Name, c.Logs(tb))
		}
		_ = exec.Command(rt, "rm", "-f", "-t", "0", c.Name).Run()
	})
	args := []string{"run", "--name", c.Name, "--network", "host", "-v", c.Volume + ":/data",
		"-e", "KPLANE_HTTPS_PORT=" + strconv.Itoa(port)}
	if !opts.Foreground {
		args = append(args, "-d")
	}
	for _, e := range opts.Env {
		args = append(args, "-e", e)
	}
	args = append(append(args, opts.Args...), opts.Image)
	out, err := exec.Command(rt, args...).CombinedOutput()
	if opts.Foreground {
		c.Output, c.Err = string(out), err
		return c
	}
	if err != nil {
		tb.Fatalf("%s %s: %v\n%s", rt, strings.Join(args, " "), err, out)
	}
	return c
}

// run runs the runtime with args and returns its trimmed combined output.
func (c *Container) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Runtime, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", filepath.Base(c.Runtime), strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return strings.TrimSpace(out.String()), err
}

// Must runs the runtime with args and fails the test on error.
func (c *Container) Must(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := c.run(args...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// Exec runs the image's kplane binary in the container (there is no shell)
// and returns its standard output.
func (c *Container) Exec(tb testing.TB, args ...string) string {
	tb.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(c.Runtime, append([]string{"exec", c.Name, "/usr/local/bin/kplane"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("exec kplane %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// Healthy reports whether the container's HEALTHCHECK passes now. Podman
// schedules health checks with systemd timers, which a machine without
// systemd does not run, so under podman the image's check is run here
// (`podman healthcheck run` runs exactly the image's HEALTHCHECK command);
// docker runs it itself, and its verdict is read.
func (c *Container) Healthy() error {
	if IsPodman(c.Runtime) {
		_, err := c.run("healthcheck", "run", c.Name)
		return err
	}
	status, err := c.run("inspect", "--format", "{{.State.Health.Status}}", c.Name)
	if err != nil {
		return err
	}
	if status != "healthy" {
		return fmt.Errorf("health status %q", status)
	}
	return nil
}

// WaitHealthy waits until the container is healthy and returns how long
// that took from the call.
func (c *Container) WaitHealthy(tb testing.TB, timeout time.Duration) time.Duration {
	tb.Helper()
	began := time.Now()
	err := WaitFor(context.Background(), timeout, func(context.Context) error {
		if running, _ := c.run("inspect", "--format", "{{.State.Running}}", c.Name); running == "false" {
			return Stop(fmt.Errorf("container %s exited", c.Name))
		}
		return c.Healthy()
	})
	if err != nil {
		tb.Fatalf("container %s not healthy: %v\n--- log ---\n%s", c.Name, err, c.Logs(tb))
	}
	return time.Since(began)
}

// Logs is the container's output so far.
func (c *Container) Logs(tb testing.TB) string {
	tb.Helper()
	out, _ := c.run("logs", c.Name)
	return out
}

// ExitCode is the exit code of the stopped container.
func (c *Container) ExitCode(tb testing.TB) int {
	tb.Helper()
	out := c.Must(tb, "inspect", "--format", "{{.State.ExitCode}}", c.Name)
	code, err := strconv.Atoi(out)
	if err != nil {
		tb.Fatalf("exit code %q: %v", out, err)
	}
	return code
}
