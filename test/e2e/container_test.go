package e2e

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"kplane.dev/kplane/test/e2e/framework"
)

// The container image run as a CI job's service, the way README's
// snippets run it: host network, a named volume on /data, KPLANE_TOKEN and
// KPLANE_TLS_SAN set, credentials fetched without a shell in the image. 50
// planes and their objects, written with kubectl and the Python SDK from
// outside the container, survive `kill -s KILL` and `start`; `stop` then
// drains and exits 0 within the runtime's stop timeout.
func TestContainerService(t *testing.T) {
	rt := framework.ContainerRuntime(t)
	image := framework.BuildImage(t, rt)
	token := randomToken(t)
	const alias = "kplane-service.test"
	c := framework.RunContainer(t, rt, framework.ContainerOptions{Image: image,
		Env: []string{"KPLANE_TOKEN=" + token, "KPLANE_TLS_SAN=" + alias}})
	t.Logf("healthy %s after run", c.WaitHealthy(t, 90*time.Second).Round(time.Millisecond))

	// The admin kubeconfig, through exec (GitHub Actions' snippet).
	dir := t.TempDir()
	adminKubeconfig := filepath.Join(dir, "admin.kubeconfig")
	writeFile(t, adminKubeconfig, c.Exec(t, "kubeconfig", "--admin", "--server", c.URL, "root"))
	checkServingName(t, adminKubeconfig, c.Port, alias)

	const planes, byKubectl = 50, 25
	plane := func(i int) string { return fmt.Sprintf("svc-%02d", i) }
	// kubectl with a plane kubeconfig made from the token alone (GitLab
	// CI's snippet): the plane comes into being on its first request.
	kubeconfigs := map[string]string{}
	for i := 0; i < byKubectl; i++ {
		kubeconfigs[plane(i)] = tokenKubeconfig(t, dir, c.URL, token, plane(i))
		kubectlIn(t, kubeconfigs[plane(i)], configMapYAML("from-kubectl", plane(i)), "apply", "-f", "-")
	}
	var byPython []string
	for i := byKubectl; i < planes; i++ {
		byPython = append(byPython, plane(i))
	}
	runPythonSDK(t, adminKubeconfig, "create", byPython...)

	c.Must(t, "kill", "--signal", "KILL", c.Name)
	if code := c.ExitCode(t); code != 137 {
		t.Fatalf("exit code after kill -s KILL: %d, want 137", code)
	}
	c.Must(t, "start", c.Name)
	t.Logf("healthy %s after start", c.WaitHealthy(t, 90*time.Second).Round(time.Millisecond))

	var all []string
	for i := 0; i < planes; i++ {
		all = append(all, plane(i))
	}
	runPythonSDK(t, adminKubeconfig, "verify", all...)
	for i := 0; i < byKubectl; i++ {
		out := kubectlIn(t, kubeconfigs[plane(i)], "", "get", "configmap", "from-kubectl", "-o", "jsonpath={.data.plane}")
		if out != plane(i) {
			t.Fatalf("plane %s after restart: configmap from-kubectl says %q", plane(i), out)
		}
	}

	stopCleanly(t, c)
}

// stopCleanly stops the container with the runtime's default timeout (10
// s, then SIGKILL): exit code 0 and a log without a shutdown step that gave
// up mean it drained in time.
func stopCleanly(t *testing.T, c *framework.Container) {
	t.Helper()
	began := time.Now()
	c.Must(t, "stop", c.Name)
	t.Logf("stopped in %s", time.Since(began).Round(time.Millisecond))
	if code := c.ExitCode(t); code != 0 {
		t.Fatalf("exit code after stop: %d, want 0\n%s", code, c.Logs(t))
	}
	checkCleanShutdownLog(t, lastRun(c.Logs(t)))
}

// lastRun is the part of a container log written by its last start.
func lastRun(log string) string {
	const banner = "kplane "
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "Deleting old lease on startup") || strings.HasPrefix(lines[i], banner) {
			return strings.Join(lines[i:], "\n")
		}
	}
	return log
}

// checkCleanShutdownLog fails on the marks of a shutdown that waited for a
// timeout instead of draining.
func checkCleanShutdownLog(t *testing.T, log string) {
	t.Helper()
	if !strings.Contains(log, "kplane stopped") {
		t.Errorf("the log does not end with a clean stop:\n%s", tailLines(log, 30))
	}
	for _, bad := range []string{"context deadline exceeded", "RemoveEndpoints() timed out", "error deleting old lease",
		"Unable to delete lease", "Unable to remove peer endpoint leases"} {
		if strings.Contains(log, bad) {
			t.Errorf("the log shows %q:\n%s", bad, tailLines(log, 30))
		}
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// The bare binary, restarted after kill -9, stops cleanly too: the shutdown
// of a server that found its own stale leases in the datastore.
func TestShutdownAfterKillIsClean(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	s.MustKubectl(t, uniquePlane(t, "unclean"), configMapYAML("before-kill", "x"), "apply", "-f", "-")
	s.Kill()
	s.Restart(t)
	logBefore := len(s.Log())
	began := time.Now()
	s.Stop()
	t.Logf("stopped in %s", time.Since(began).Round(time.Millisecond))
	if code := s.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	checkCleanShutdownLog(t, s.Log()[logBefore:])
}

// --read-only: nothing outside the /data volume is written, not even /tmp
// (podman mounts a tmpfs there unless told not to; docker does not).
func TestContainerReadOnlyRootFilesystem(t *testing.T) {
	rt := framework.ContainerRuntime(t)
	image := framework.BuildImage(t, rt)
	args := []string{"--read-only"}
	if framework.IsPodman(rt) {
		args = append(args, "--read-only-tmpfs=false")
	}
	c := framework.RunContainer(t, rt, framework.ContainerOptions{Image: image, Args: args})
	c.WaitHealthy(t, 90*time.Second)
	kubeconfig := filepath.Join(t.TempDir(), "ro.kubeconfig")
	writeFile(t, kubeconfig, c.Exec(t, "kubeconfig", "read-only"))
	kubectlIn(t, kubeconfig, configMapYAML("written", "read-only"), "apply", "-f", "-")
	stopCleanly(t, c)
}

// Run as another numeric user than the one owning /data, the container
// exits at once with one line saying what to do.
func TestContainerWrongUser(t *testing.T) {
	rt := framework.ContainerRuntime(t)
	image := framework.BuildImage(t, rt)
	c := framework.RunContainer(t, rt, framework.ContainerOptions{Image: image, Args: []string{"--user", "4242:4242"}, Foreground: true})
	if c.Err == nil {
		t.Fatalf("the container ran as uid 4242 on a /data of uid 65532:\n%s", c.Output)
	}
	// The container's own output: the runtime's messages (podman's about
	// systemd timers on a machine without systemd) are not part of it.
	out := strings.TrimSpace(c.Logs(t))
	if strings.Count(out, "\n") != 0 {
		t.Fatalf("want one line, got:\n%s", out)
	}
	for _, want := range []string{"/data", "uid 4242", "uid 65532"} {
		if !strings.Contains(out, want) {
			t.Errorf("the error does not name %q: %s", want, out)
		}
	}
}

// The image is the binary and an empty directory: within 1 MiB of the
// binary, a numeric non-root user, a HEALTHCHECK (which podman's default
// OCI format would have dropped).
func TestContainerImage(t *testing.T) {
	rt := framework.ContainerRuntime(t)
	image := framework.BuildImage(t, rt)
	bin, err := framework.Binary()
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(rt, "image", "inspect", "--format",
		"{{.Size}}|{{.Config.User}}|{{json .Config.Healthcheck}}|{{json .Config.Volumes}}", image).Output()
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Split(strings.TrimSpace(string(out)), "|")
	size, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		t.Fatalf("image size %q: %v", fields[0], err)
	}
	t.Logf("image %d bytes, binary %d bytes", size, info.Size())
	if d := size - info.Size(); d < 0 || d > 1<<20 {
		t.Errorf("image is %d bytes, binary %d: want the image within 1 MiB of the binary", size, info.Size())
	}
	if fields[1] != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", fields[1])
	}
	if !strings.Contains(fields[2], "healthcheck") {
		t.Errorf("no HEALTHCHECK running kplane healthcheck: %s", fields[2])
	}
	if !strings.Contains(fields[3], "/data") {
		t.Errorf("/data is not a volume: %s", fields[3])
	}
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func configMapYAML(name, plane string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: default\ndata:\n  plane: %s\n", name, plane)
}

// checkServingName verifies the server's certificate for name (a CI
// service alias given in KPLANE_TLS_SAN) against the CA of kubeconfig.
func checkServingName(t *testing.T, kubeconfig string, port int, name string) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, cluster := range cfg.Clusters {
		pool.AppendCertsFromPEM(cluster.CertificateAuthorityData)
	}
	conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{RootCAs: pool, ServerName: name})
	if err != nil {
		t.Fatalf("the serving certificate is not valid for %s: %v", name, err)
	}
	conn.Close()
}

// tokenKubeconfig runs `kplane kubeconfig --server --token` on this host,
// as a CI job that knows only the token does.
func tokenKubeconfig(t *testing.T, dir, url, token, plane string) string {
	t.Helper()
	bin, err := framework.Binary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "kubeconfig", "--server", url, plane)
	cmd.Env = append(os.Environ(), "KPLANE_TOKEN="+token)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kplane kubeconfig --server %s %s: %v", url, plane, err)
	}
	path := filepath.Join(dir, plane+".kubeconfig")
	writeFile(t, path, string(out))
	return path
}

// kubectlIn runs kubectl with kubeconfig and returns its output.
func kubectlIn(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// containerSDKScript creates planes, each with a ConfigMap, or verifies
// that every plane given is Ready and holds its ConfigMap (the one of
// kubectl or of the SDK), using the Python SDK.
const containerSDKScript = `
import sys
import kplane

client = kplane.Client.from_kubeconfig(sys.argv[1])
mode, planes = sys.argv[2], sys.argv[3:]
if mode == "create":
    for name in planes:
        plane = client.create_plane(name)
        plane.wait_until_ready(timeout=120)
        client.request("POST", plane.path("/api/v1/namespaces/default/configmaps"), body={
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "from-python"}, "data": {"plane": name}})
else:
    ready = {p.name for p in client.list_planes() if p.phase == "Ready"}
    missing = [name for name in planes if name not in ready]
    if missing:
        sys.exit(f"planes not Ready after the restart: {missing}")
    for name in planes:
        snap = client.plane(name).state(resource="configmaps", namespace="default")
        found = {item["metadata"]["name"]: item.get("data", {}) for r in snap.resources for item in r.items}
        mine = [cm for cm in ("from-kubectl", "from-python") if found.get(cm, {}).get("plane") == name]
        if len(mine) != 1:
            sys.exit(f"plane {name}: configmaps {sorted(found)}, want exactly one of from-kubectl, from-python naming it")
print("ok", mode, len(planes))
`

func runPythonSDK(t *testing.T, kubeconfig, mode string, planes ...string) {
	t.Helper()
	python := framework.RequireCommand(t, "python3", "apt-get install python3; .ci/run installs it")
	script := filepath.Join(t.TempDir(), "sdk.py")
	writeFile(t, script, containerSDKScript)
	cmd := exec.Command(python, append([]string{script, kubeconfig, mode}, planes...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+repoFile(t, "sdk/python/src"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("Python SDK (%s): %v\n%s", mode, err, out)
	}
	t.Logf("Python SDK: %s", strings.TrimSpace(string(out)))
}

// The archive `make release` writes for each architecture (scripts/image.sh
// save) loads into the runtime with its HEALTHCHECK, user and architecture:
// the docker archive format keeps the health check, which podman's OCI
// archive would drop.
func TestContainerImageArchive(t *testing.T) {
	rt := framework.ContainerRuntime(t)
	bin, err := framework.Binary()
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "kplane-image.tar")
	tag := fmt.Sprintf("localhost/kplane-e2e-archive:%d", os.Getpid())
	save := exec.Command(repoFile(t, "scripts/image.sh"), "save", tag, runtime.GOARCH, bin, archive)
	save.Env = append(os.Environ(), "CONTAINER_RUNTIME="+rt)
	if out, err := save.CombinedOutput(); err != nil {
		t.Fatalf("image.sh save: %v\n%s", err, out)
	}
	if out, err := exec.Command(rt, "rmi", tag).CombinedOutput(); err != nil {
		t.Fatalf("removing the image before loading its archive: %v\n%s", err, out)
	}
	if out, err := exec.Command(rt, "load", "-i", archive).CombinedOutput(); err != nil {
		t.Fatalf("load: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(rt, "rmi", tag).Run() })
	out, err := exec.Command(rt, "image", "inspect", "--format",
		"{{.Architecture}}|{{.Config.User}}|{{json .Config.Healthcheck}}", tag).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	fields := strings.Split(strings.TrimSpace(string(out)), "|")
	if fields[0] != runtime.GOARCH || fields[1] != "65532:65532" || !strings.Contains(fields[2], "healthcheck") {
		t.Fatalf("loaded image: architecture %s, user %s, health check %s", fields[0], fields[1], fields[2])
	}
}
