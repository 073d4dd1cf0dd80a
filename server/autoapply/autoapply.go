package autoapply

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
)

// FieldManager owns the fields the manifests set.
const FieldManager = "kplane-manifests"

// maxFileSize keeps a stray file (a database dump, an image) from being
// read into memory.
const maxFileSize = 16 << 20

// Config configures an Applier.
type Config struct {
	// Dir is the manifests directory; it is created if missing.
	Dir string
	// Loopback reaches the root plane as the server (system:masters).
	Loopback *rest.Config
	// Interval is how often Dir is scanned for changes (default 2s).
	Interval time.Duration
	// WaitTimeout bounds waiting for a new plane to be ready or a new kind
	// to be served (default 30s).
	WaitTimeout time.Duration
	// MaxBackoff caps the delay before a failed file is tried again
	// (default 1m).
	MaxBackoff time.Duration
}

// Applier keeps the manifests of a directory applied.
type Applier struct {
	config  Config
	targets *targets
	// files is only touched by the goroutine running Sync.
	files map[string]*fileState
}

// fileState is what the last attempt to apply a file did.
type fileState struct {
	hash     [sha256.Size]byte
	applied  bool
	failures int
	retryAt  time.Time
}

// New returns an Applier; nothing happens until Sync or Run.
func New(config Config) (*Applier, error) {
	if config.Dir == "" {
		return nil, fmt.Errorf("manifests directory must not be empty")
	}
	if config.Interval == 0 {
		config.Interval = 2 * time.Second
	}
	if config.WaitTimeout == 0 {
		config.WaitTimeout = 30 * time.Second
	}
	if config.MaxBackoff == 0 {
		config.MaxBackoff = time.Minute
	}
	t, err := newTargets(config.Loopback, config.WaitTimeout)
	if err != nil {
		return nil, err
	}
	return &Applier{config: config, targets: t, files: map[string]*fileState{}}, nil
}

// Run applies the directory, closes firstPass (if not nil) and then keeps
// applying changes every Interval until ctx is done.
func (a *Applier) Run(ctx context.Context, firstPass chan<- struct{}) {
	if err := os.MkdirAll(a.config.Dir, 0o700); err != nil {
		logrus.WithError(err).WithField("dir", a.config.Dir).Error("creating the manifests directory")
	}
	a.Sync(ctx)
	if firstPass != nil {
		close(firstPass)
	}
	t := time.NewTicker(a.config.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.Sync(ctx)
		}
	}
}

// Sync applies every file that is new, changed, or failed and due for
// another try.
func (a *Applier) Sync(ctx context.Context) {
	paths, err := manifestFiles(a.config.Dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			logrus.WithError(err).WithField("dir", a.config.Dir).Warn("reading the manifests directory")
		}
		return
	}
	now := time.Now()
	present := map[string]bool{}
	var work []*fileWork
	for _, path := range paths {
		present[path] = true
		data, err := readManifest(path)
		if err != nil {
			a.failed(path, [sha256.Size]byte{}, now, err)
			continue
		}
		hash := sha256.Sum256(data)
		state := a.files[path]
		if state != nil && state.hash == hash && (state.applied || now.Before(state.retryAt)) {
			continue
		}
		docs, err := parse(data)
		if err != nil {
			a.failed(path, hash, now, err)
			continue
		}
		work = append(work, &fileWork{path: path, name: a.rel(path), hash: hash, docs: docs})
	}
	// A deleted file's objects stay; forgetting it means that putting it
	// back applies it again.
	for path := range a.files {
		if !present[path] {
			logrus.WithField("file", a.rel(path)).Info("manifest removed; its objects are left in place")
			delete(a.files, path)
		}
	}
	if len(work) == 0 {
		return
	}
	a.apply(ctx, work)
	for _, w := range work {
		if err := errors.Join(w.errs...); err != nil {
			a.failed(w.path, w.hash, time.Now(), err)
			continue
		}
		a.files[w.path] = &fileState{hash: w.hash, applied: true}
		logrus.WithFields(logrus.Fields{"file": a.rel(w.path), "objects": len(w.docs)}).Info("manifest applied")
	}
}

func (a *Applier) failed(path string, hash [sha256.Size]byte, now time.Time, err error) {
	state := a.files[path]
	if state == nil || state.hash != hash {
		state = &fileState{hash: hash}
		a.files[path] = state
	}
	state.applied = false
	state.failures++
	backoff := a.config.Interval << min(state.failures-1, 10)
	if backoff > a.config.MaxBackoff || backoff <= 0 {
		backoff = a.config.MaxBackoff
	}
	state.retryAt = now.Add(backoff)
	logrus.WithFields(logrus.Fields{"file": a.rel(path), "retryIn": backoff.String()}).
		WithError(err).Error("manifest not applied")
}

func (a *Applier) rel(path string) string {
	if r, err := filepath.Rel(a.config.Dir, path); err == nil {
		return r
	}
	return path
}

// manifestFiles lists the YAML and JSON files under dir in path order,
// skipping dotfiles and dot-directories.
func manifestFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 {
			switch strings.ToLower(filepath.Ext(path)) {
			case ".yaml", ".yml", ".json":
				out = append(out, path)
			}
		}
		return nil
	})
	return out, err
}

func readManifest(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file")
	}
	if info.Size() > maxFileSize {
		return nil, fmt.Errorf("%d bytes is larger than the %d MiB a manifest may be", info.Size(), maxFileSize>>20)
	}
	return os.ReadFile(path)
}
