package kplanetest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// DefaultDownloadURL is where releases are downloaded from: the layout
// install.sh uses, <base>/download/<version>/kplane-<os>-<arch> next to
// sha256sums.txt.
const DefaultDownloadURL = "https://github.com/kplane/kplane/releases"

// MissingBinaryError says that no kplane binary was found, and where the
// search looked.
type MissingBinaryError struct {
	Looked []string
}

func (e *MissingBinaryError) Error() string {
	return "kplanetest: no kplane binary found; looked at: " + strings.Join(e.Looked, "; ") +
		". Set KPLANE_BINARY to a kplane binary, put kplane in PATH, set KPLANE_VERSION to download a release, " +
		"or attach to a running server with KPLANE_URL and KPLANE_TOKEN"
}

// binarySource is what findBinary reads besides Options: the environment
// and PATH lookup, so tests can give their own.
type binarySource struct {
	getenv   func(string) string
	lookPath func(string) (string, error)
}

var osBinarySource = binarySource{getenv: os.Getenv, lookPath: exec.LookPath}

// findBinary returns the kplane binary to run: Options.BinaryPath,
// KPLANE_BINARY, kplane in PATH, then the release of Options.Version (or
// KPLANE_VERSION) in the cache, downloaded there if missing.
func findBinary(ctx context.Context, opts Options, src binarySource) (string, error) {
	for _, given := range []struct{ name, path string }{
		{"Options.BinaryPath", opts.BinaryPath},
		{"KPLANE_BINARY", src.getenv("KPLANE_BINARY")},
	} {
		if given.path == "" {
			continue
		}
		if err := checkExecutable(given.path); err != nil {
			return "", fmt.Errorf("kplanetest: %s=%s: %w", given.name, given.path, err)
		}
		return given.path, nil
	}
	looked := []string{"Options.BinaryPath (empty)", "KPLANE_BINARY (not set)"}
	if path, err := src.lookPath("kplane"); err == nil {
		return path, nil
	}
	looked = append(looked, fmt.Sprintf("kplane in PATH (%s)", src.getenv("PATH")))
	version := firstNonEmpty(opts.Version, src.getenv("KPLANE_VERSION"))
	if version == "" {
		looked = append(looked, "a release download (no Options.Version or KPLANE_VERSION)")
		return "", &MissingBinaryError{Looked: looked}
	}
	cacheDir, err := cacheDir(opts, src)
	if err != nil {
		return "", err
	}
	path := filepath.Join(cacheDir, version, assetName())
	if checkExecutable(path) == nil {
		return path, nil
	}
	base := strings.TrimRight(firstNonEmpty(opts.DownloadURL, src.getenv("KPLANE_DOWNLOAD_URL"), DefaultDownloadURL), "/")
	if err := download(ctx, base+"/download/"+version, path); err != nil {
		return "", fmt.Errorf("kplanetest: kplane %s is not in %s and could not be downloaded: %w", version, path, err)
	}
	return path, nil
}

func checkExecutable(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

func cacheDir(opts Options, src binarySource) (string, error) {
	if dir := firstNonEmpty(opts.CacheDir, src.getenv("KPLANE_CACHE_DIR")); dir != "" {
		return dir, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kplanetest: no cache directory for downloads (set KPLANE_CACHE_DIR): %w", err)
	}
	return filepath.Join(dir, "kplane"), nil
}

// assetName is the release asset of this platform.
func assetName() string { return "kplane-" + runtime.GOOS + "-" + runtime.GOARCH }

// download fetches <base>/<asset> into path after checking it against the
// sum <base>/sha256sums.txt lists for it. Nothing unverified is kept: a
// release without a sum for the asset is refused.
func download(ctx context.Context, base, path string) error {
	client := &http.Client{Timeout: 5 * time.Minute}
	want, err := releaseSum(ctx, client, base+"/sha256sums.txt", assetName())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".download-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	body, err := get(ctx, client, base+"/"+assetName())
	if err != nil {
		tmp.Close()
		return err
	}
	defer body.Close()
	hash := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, hash), body); err != nil {
		tmp.Close()
		return fmt.Errorf("downloading %s: %w", base+"/"+assetName(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if got := hex.EncodeToString(hash.Sum(nil)); got != want {
		return fmt.Errorf("%s has sha256 %s, but sha256sums.txt says %s: refusing it", base+"/"+assetName(), got, want)
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func releaseSum(ctx context.Context, client *http.Client, url, asset string) (string, error) {
	body, err := get(ctx, client, url)
	if err != nil {
		return "", err
	}
	defer body.Close()
	scanner := bufio.NewScanner(io.LimitReader(body, 1<<20))
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) == 2 && strings.TrimPrefix(fields[1], "*") == asset {
			return strings.ToLower(fields[0]), nil
		}
	}
	if err := scanner.Err(); err != nil {
		return "", fmt.Errorf("reading %s: %w", url, err)
	}
	return "", fmt.Errorf("%s lists no sum for %s: refusing to download it unverified", url, asset)
}

func get(ctx context.Context, client *http.Client, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("downloading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("downloading %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
