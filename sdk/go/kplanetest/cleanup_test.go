package kplanetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// childEnv makes the test binary run the tests of runChild instead of its
// own: a test binary that fails and panics, attached to the parent's
// server.
const childEnv = "KPLANETEST_CHILD"

// runChild runs two tests that end badly after taking a plane each,
// printing the plane ids and the run id for the parent to check.
func runChild(m *testing.M, mode string) int {
	// testing.RunTests runs nothing until m.Run has read the test flags
	// (-test.cpu among them): run m with no test selected first.
	flag.Parse()
	if err := flag.Set("test.run", "^$"); err != nil {
		fmt.Println("child:", err)
		return 3
	}
	m.Run()
	env, err := Start(context.Background(), Options{CRDDirectoryPaths: []string{"testdata/crds"}})
	if err != nil {
		fmt.Println("child: start:", err)
		return 3
	}
	SetDefault(env)
	fmt.Println("RUN", env.RunID())
	take := func(t *testing.T) {
		cfg := Plane(t)
		fmt.Println("PLANE", strings.TrimSuffix(strings.TrimPrefix(cfg.Host, env.URL()+"/clusters/"), "/control-plane"))
	}
	tests := []testing.InternalTest{
		{Name: "TestFails", F: func(t *testing.T) { take(t); t.Fatal("failing on purpose") }},
		{Name: "TestPanics", F: func(t *testing.T) {
			take(t)
			if mode == "panic" {
				panic("panicking on purpose")
			}
		}},
	}
	// A panic ends the process inside RunTests, after the panicking test's
	// cleanups: Stop is never reached, as in a real test binary.
	if testing.RunTests(func(_, _ string) (bool, error) { return true, nil }, tests) {
		return 0
	}
	return 1
}

// TestCleanupAfterFailureAndPanic runs this binary as a child whose tests
// take planes and then fail and panic; their planes must be gone when it
// has exited, though the panic skips everything after the test's cleanups.
func TestCleanupAfterFailureAndPanic(t *testing.T) {
	env := Default()
	cmd := exec.Command(os.Args[0], "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=panic", "KPLANE_URL="+env.URL(), "KPLANE_TOKEN="+env.AdminConfig().BearerToken)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil || !strings.Contains(out.String(), "panicking on purpose") || !strings.Contains(out.String(), "failing on purpose") {
		t.Fatalf("child: %v, want it to fail and panic\n%s", err, out.String())
	}
	var runID string
	var planes []string
	scanner := bufio.NewScanner(&out)
	for scanner.Scan() {
		if id, ok := strings.CutPrefix(scanner.Text(), "PLANE "); ok {
			planes = append(planes, id)
		}
		if id, ok := strings.CutPrefix(scanner.Text(), "RUN "); ok {
			runID = id
		}
	}
	if len(planes) != 2 || runID == "" {
		t.Fatalf("child took planes %v in run %q, want 2\n%s", planes, runID, out.String())
	}
	for _, id := range planes {
		// The cleanups sent the deletions; the server finishes them.
		if err := env.waitGone(context.Background(), id); err != nil {
			t.Errorf("plane of the child: %v", err)
		}
	}
	assertNoPlanesLeft(t, env, runID)
}

// TestDownload: a release is downloaded once into the cache, checked
// against sha256sums.txt, and refused when the sum does not match.
func TestDownload(t *testing.T) {
	binary, err := os.ReadFile(os.Getenv("KPLANE_BINARY"))
	if err != nil {
		t.Fatalf("the binary to serve as a release (KPLANE_BINARY): %v", err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(binary))
	var downloads atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/download/v9.9.9/sha256sums.txt", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%s  %s\n0000  install.sh\n", sum, assetName())
	})
	mux.HandleFunc("/download/v9.9.9/"+assetName(), func(w http.ResponseWriter, _ *http.Request) {
		downloads.Add(1)
		w.Write(binary)
	})
	mux.HandleFunc("/download/v6.6.6/sha256sums.txt", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%x  %s\n", sha256.Sum256([]byte("other")), assetName())
	})
	mux.HandleFunc("/download/v6.6.6/"+assetName(), func(w http.ResponseWriter, _ *http.Request) { w.Write(binary) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cache := t.TempDir()
	noLocal := binarySource{getenv: func(string) string { return "" }, lookPath: func(string) (string, error) { return "", os.ErrNotExist }}
	opts := Options{Version: "v9.9.9", DownloadURL: srv.URL, CacheDir: cache}
	for range 2 {
		path, err := findBinary(context.Background(), opts, noLocal)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(cache, "v9.9.9", assetName()); path != want {
			t.Errorf("path %s, want %s", path, want)
		}
		if out, err := exec.Command(path, "--version").CombinedOutput(); err != nil {
			t.Errorf("the downloaded binary does not run: %v %s", err, out)
		}
	}
	if downloads.Load() != 1 {
		t.Errorf("%d downloads, want 1 (the second is cached)", downloads.Load())
	}
	opts.Version = "v6.6.6"
	if _, err := findBinary(context.Background(), opts, noLocal); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("a download whose sum does not match: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cache, "v6.6.6", assetName())); !os.IsNotExist(err) {
		t.Errorf("the unverified download was kept: %v", err)
	}
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kplane"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["kplane"] = &clientcmdapi.Context{Cluster: "kplane", AuthInfo: "admin"}
	kc.CurrentContext = "kplane"
	path := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
