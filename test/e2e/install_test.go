package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kplane.dev/kplane/test/e2e/framework"
)

// repoFile is a file of the repository (tests run in test/e2e).
func repoFile(t *testing.T, name string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// installEnv is the environment of install.sh confined to prefix: no path
// outside it is written, and no root is needed.
func installEnv(prefix string, extra ...string) []string {
	env := append(os.Environ(),
		"INSTALL_DIR="+filepath.Join(prefix, "usr/local/bin"),
		"SYSTEMD_DIR="+filepath.Join(prefix, "etc/systemd/system"),
		"KPLANE_CONFIG_DIR="+filepath.Join(prefix, "etc/kplane"),
		"KPLANE_DATA_DIR="+filepath.Join(prefix, "var/lib/kplane"),
		"KPLANE_SKIP_ENABLE=true",
		"KPLANE_BINARY=",
		"KPLANE_SHA256=",
		"KPLANE_INSECURE_SKIP_CHECKSUM=",
	)
	return append(env, extra...)
}

func runInstall(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{repoFile(t, "install.sh")}, args...)...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// tree lists every path under root (relative), directories with a slash.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func TestInstallScriptLint(t *testing.T) {
	shellcheck := framework.RequireCommand(t, "shellcheck", "apt-get install shellcheck; .ci/run installs it")
	if out, err := exec.Command(shellcheck, "--shell=sh", repoFile(t, "install.sh")).CombinedOutput(); err != nil {
		t.Fatalf("shellcheck install.sh: %v\n%s", err, out)
	}
}

// install.sh --help, piped into sh as the README shows it, documents the
// options and the checksum escape.
func TestInstallScriptHelp(t *testing.T) {
	script, err := os.Open(repoFile(t, "install.sh"))
	if err != nil {
		t.Fatal(err)
	}
	defer script.Close()
	cmd := exec.Command("sh", "-s", "-", "--help")
	cmd.Stdin = script
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh --help: %v\n%s", err, out)
	}
	for _, want := range []string{"--systemd", "--uninstall", "KPLANE_SHA256", "KPLANE_INSECURE_SKIP_CHECKSUM"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("install.sh --help does not mention %s:\n%s", want, out)
		}
	}
}

// install.sh --systemd from a local binary into a temp prefix; the
// installed binary serves; --uninstall --purge leaves the prefix as it was.
func TestInstallScriptLocalBinary(t *testing.T) {
	bin, err := framework.Binary()
	if err != nil {
		t.Fatal(err)
	}
	prefix := t.TempDir()
	// What a machine has before kplane.
	for _, dir := range []string{"usr/local/bin", "etc/systemd/system", "var/lib"} {
		if err := os.MkdirAll(filepath.Join(prefix, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before := tree(t, prefix)

	out, err := runInstall(t, installEnv(prefix, "KPLANE_BINARY="+bin, "KPLANE_SHA256=0000"), "--systemd")
	if err == nil || !strings.Contains(out, "sha256 mismatch") {
		t.Fatalf("a wrong KPLANE_SHA256 must stop the install: %v\n%s", err, out)
	}
	if got := tree(t, prefix); strings.Join(got, " ") != strings.Join(before, " ") {
		t.Fatalf("a refused install wrote %v", got)
	}

	out, err = runInstall(t, installEnv(prefix, "KPLANE_BINARY="+bin, "KPLANE_SHA256="+sha256File(t, bin)), "--systemd")
	if err != nil {
		t.Fatalf("install.sh --systemd: %v\n%s", err, out)
	}
	installed := filepath.Join(prefix, "usr/local/bin/kplane")
	if sha256File(t, installed) != sha256File(t, bin) {
		t.Fatal("installed binary differs from the source binary")
	}
	if info, err := os.Stat(installed); err != nil || info.Mode().Perm()&0o111 == 0 {
		t.Fatalf("installed binary is not executable: %v %v", info, err)
	}
	unitPath := filepath.Join(prefix, "etc/systemd/system/kplane.service")
	unit, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ExecStart=" + installed + " server",
		"EnvironmentFile=-" + filepath.Join(prefix, "etc/kplane/kplane.env"),
		"Environment=KPLANE_DATA_DIR=" + filepath.Join(prefix, "var/lib/kplane"),
		"Restart=always",
		"LimitNOFILE=",
	} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	analyze := framework.RequireCommand(t, "systemd-analyze", "apt-get install systemd; .ci/run installs it")
	if out, err := exec.Command(analyze, "verify", unitPath).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	env, err := os.ReadFile(filepath.Join(prefix, "etc/kplane/kplane.env"))
	if err != nil || !strings.Contains(string(env), "KPLANE_DATA_DIR="+filepath.Join(prefix, "var/lib/kplane")) {
		t.Fatalf("env file: %v\n%s", err, env)
	}

	// The installed binary starts and serves, with the data dir the unit
	// would give it.
	dataDir := filepath.Join(prefix, "var/lib/kplane")
	s := framework.StartServer(t, framework.Options{Binary: installed, DataDir: dataDir})
	plane := uniquePlane(t, "installed")
	if _, err := s.Client(t, plane).CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("installed kplane does not serve plane %s: %v", plane, err)
	}
	s.Stop()

	// Installing again keeps the operator's env file.
	if err := os.WriteFile(filepath.Join(prefix, "etc/kplane/kplane.env"), []byte("KPLANE_LOG_FORMAT=json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runInstall(t, installEnv(prefix, "KPLANE_BINARY="+bin), "--systemd"); err != nil {
		t.Fatalf("second install: %v\n%s", err, out)
	}
	if env, _ := os.ReadFile(filepath.Join(prefix, "etc/kplane/kplane.env")); string(env) != "KPLANE_LOG_FORMAT=json\n" {
		t.Fatalf("reinstall overwrote the env file: %q", env)
	}

	out, err = runInstall(t, installEnv(prefix), "--uninstall")
	if err != nil {
		t.Fatalf("--uninstall: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "admin.kubeconfig")); err != nil {
		t.Fatalf("--uninstall without --purge must keep the data: %v", err)
	}
	if out, err = runInstall(t, installEnv(prefix), "--uninstall", "--purge"); err != nil {
		t.Fatalf("--uninstall --purge: %v\n%s", err, out)
	}
	if got := tree(t, prefix); strings.Join(got, " ") != strings.Join(before, " ") {
		t.Fatalf("uninstall left files behind: have %v, had %v", got, before)
	}
}

// install.sh downloads the binary of this platform from a release,
// checks it against the release's sha256sums.txt, refuses to install a
// download it cannot verify unless told to, and refuses a platform kplane is
// not released for.
func TestInstallScriptDownload(t *testing.T) {
	if runtime.GOOS != "linux" {
		// The binary under test is served as the release's linux asset and
		// must run here.
		t.Skip("this platform cannot run it: the release served is the linux build under test")
	}
	bin, err := framework.Binary()
	if err != nil {
		t.Fatal(err)
	}
	_, curlErr := exec.LookPath("curl")
	_, wgetErr := exec.LookPath("wget")
	framework.Require(t, curlErr == nil || wgetErr == nil, "install.sh needs curl or wget (apt-get install curl)")
	asset := "kplane-linux-" + runtime.GOARCH
	binary, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sums := fmt.Sprintf("%s  %s\n", sha256File(t, bin), asset)
	var mu sync.Mutex
	var requests []string
	requested := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), requests...)
	}
	release := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/releases/download/v9.9.9/" + asset:
			w.Write(binary)
		case "/releases/download/v9.9.9/sha256sums.txt":
			w.Write([]byte(sums))
		case "/releases/download/v0.0.1/" + asset:
			w.Write([]byte("#!/bin/sh\necho tampered\n"))
		case "/releases/download/v0.0.1/sha256sums.txt":
			w.Write([]byte(sums))
		case "/releases/download/v8.8.8/" + asset:
			// A release whose sha256sums.txt cannot be downloaded.
			w.Write(binary)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(release.Close)
	base := "KPLANE_DOWNLOAD_URL=" + release.URL + "/releases"

	prefix := t.TempDir()
	out, err := runInstall(t, installEnv(prefix, base, "KPLANE_VERSION=v9.9.9"))
	if err != nil {
		t.Fatalf("install from a release: %v\n%s", err, out)
	}
	if !strings.Contains(out, "sha256 verified") {
		t.Errorf("download was not verified:\n%s", out)
	}
	if sha256File(t, filepath.Join(prefix, "usr/local/bin/kplane")) != sha256File(t, bin) {
		t.Fatal("installed binary differs from the released one")
	}

	out, err = runInstall(t, installEnv(t.TempDir(), base, "KPLANE_VERSION=v0.0.1"))
	if err == nil || !strings.Contains(out, "sha256 mismatch") {
		t.Fatalf("a binary that does not match sha256sums.txt must be refused: %v\n%s", err, out)
	}
	unverifiedPrefix := t.TempDir()
	out, err = runInstall(t, installEnv(unverifiedPrefix, base, "KPLANE_VERSION=v8.8.8"))
	if err == nil || !strings.Contains(out, "cannot verify the binary") || !strings.Contains(out, "KPLANE_INSECURE_SKIP_CHECKSUM=1") {
		t.Fatalf("a download without a checksum must be refused, naming the escape: %v\n%s", err, out)
	}
	if got := tree(t, unverifiedPrefix); len(got) != 1 {
		t.Fatalf("a refused unverified install wrote %v", got)
	}
	out, err = runInstall(t, installEnv(unverifiedPrefix, base, "KPLANE_VERSION=v8.8.8", "KPLANE_INSECURE_SKIP_CHECKSUM=1"))
	if err != nil {
		t.Fatalf("KPLANE_INSECURE_SKIP_CHECKSUM=1 must install the unverified download: %v\n%s", err, out)
	}
	if !strings.Contains(out, "WARNING") || !strings.Contains(out, "UNVERIFIED") || strings.Contains(out, "sha256 verified") {
		t.Errorf("an unverified install must warn and not claim verification:\n%s", out)
	}
	if sha256File(t, filepath.Join(unverifiedPrefix, "usr/local/bin/kplane")) != sha256File(t, bin) {
		t.Fatal("the unverified install did not install the release's binary")
	}
	out, err = runInstall(t, installEnv(t.TempDir(), base, "KPLANE_VERSION=v8.8.8", "KPLANE_SHA256="+sha256File(t, bin)))
	if err != nil || !strings.Contains(out, "sha256 verified") {
		t.Fatalf("KPLANE_SHA256 must verify a release without sha256sums.txt: %v\n%s", err, out)
	}
	out, err = runInstall(t, installEnv(t.TempDir(), base, "KPLANE_VERSION=v0.0.1", "KPLANE_INSECURE_SKIP_CHECKSUM=1"))
	if err == nil || !strings.Contains(out, "sha256 mismatch") {
		t.Fatalf("KPLANE_INSECURE_SKIP_CHECKSUM=1 must not accept a checksum that does not match: %v\n%s", err, out)
	}

	out, err = runInstall(t, installEnv(t.TempDir(), base, "KPLANE_VERSION=v404"))
	if err == nil || !strings.Contains(out, "downloading") || !strings.Contains(out, "failed") {
		t.Fatalf("a missing release must be a clear error: %v\n%s", err, out)
	}

	// A platform kplane is not released for, as uname reports it.
	fake := t.TempDir()
	uname := "#!/bin/sh\ncase $1 in -s) echo Linux ;; -m) echo riscv64 ;; esac\n"
	if err := os.WriteFile(filepath.Join(fake, "uname"), []byte(uname), 0o755); err != nil {
		t.Fatal(err)
	}
	env := installEnv(t.TempDir(), base, "KPLANE_VERSION=v9.9.9")
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = "PATH=" + fake + ":" + strings.TrimPrefix(kv, "PATH=")
		}
	}
	seen := len(requested())
	out, err = runInstall(t, env)
	if err == nil || !strings.Contains(out, "unsupported architecture riscv64") {
		t.Fatalf("riscv64 must be refused clearly: %v\n%s", err, out)
	}
	if got := requested(); len(got) != seen {
		t.Errorf("an unsupported platform still downloaded %v", got[seen:])
	}
}
