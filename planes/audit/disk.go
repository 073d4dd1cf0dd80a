package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"kplane.dev/kplane/planes"
)

const (
	logName     = "audit.jsonl"
	rotatedName = "audit.jsonl.1"
	uidName     = "plane-uid"
	// DefaultMaxFileBytes rotates a plane's log at 10 MiB: a plane's disk
	// holds at most twice that.
	DefaultMaxFileBytes = 10 << 20
	// DefaultMaxOpenFiles bounds the logs open at once (the busiest planes').
	DefaultMaxOpenFiles = 256
)

// disk holds every plane's log: <dir>/<plane>/audit.jsonl, rotated once to
// audit.jsonl.1, and plane-uid naming the Plane it belongs to. Events are
// written (not synced) before they are served, so what a reader saw
// survives a kill -9 of the process; a crash of the machine may lose what
// the kernel had not written yet.
type disk struct {
	dir      string
	maxBytes int64

	// mu guards the open files; it is taken inside a trail's lock, never
	// the other way round.
	mu   sync.Mutex
	open *lru.Cache
}

type logFile struct {
	f    *os.File
	size int64
}

func newDisk(dir string, maxBytes int64, maxOpen int) (*disk, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit directory: %w", err)
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxFileBytes
	}
	if maxOpen <= 0 {
		maxOpen = DefaultMaxOpenFiles
	}
	d := &disk{dir: dir, maxBytes: maxBytes}
	d.open = lru.NewWithEvictionFunc(maxOpen, func(_ lru.Key, value any) {
		_ = value.(*logFile).f.Close()
	})
	return d, nil
}

func (d *disk) planeDir(plane string) string { return filepath.Join(d.dir, plane) }

// append writes line to the plane's log, rotating it when it is full.
func (d *disk) append(plane string, uid types.UID, line []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	lf, err := d.file(plane, uid)
	if err != nil {
		return err
	}
	n, err := lf.f.Write(line)
	lf.size += int64(n)
	if err != nil {
		return fmt.Errorf("writing the audit log of plane %s: %w", plane, err)
	}
	if lf.size >= d.maxBytes {
		d.open.Remove(plane)
		dir := d.planeDir(plane)
		if err := os.Rename(filepath.Join(dir, logName), filepath.Join(dir, rotatedName)); err != nil {
			return fmt.Errorf("rotating the audit log of plane %s: %w", plane, err)
		}
	}
	return nil
}

// file returns the plane's open log, opening (and making) it if need be.
func (d *disk) file(plane string, uid types.UID) (*logFile, error) {
	if v, ok := d.open.Get(plane); ok {
		return v.(*logFile), nil
	}
	dir := d.planeDir(plane)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit log of plane %s: %w", plane, err)
	}
	if err := os.WriteFile(filepath.Join(dir, uidName), []byte(uid), 0o600); err != nil {
		return nil, fmt.Errorf("audit log of plane %s: %w", plane, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log of plane %s: %w", plane, err)
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("audit log of plane %s: %w", plane, err)
	}
	lf := &logFile{f: f, size: info.Size()}
	d.open.Add(plane, lf)
	return lf, nil
}

// load returns the newest max events of the plane's log; a log of another
// plane of the same name (deleted and made again while the server was
// down) is removed instead.
func (d *disk) load(plane string, uid types.UID, max int) ([]entry, error) {
	dir := d.planeDir(plane)
	stored, err := os.ReadFile(filepath.Join(dir, uidName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if types.UID(stored) != uid {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.open.Remove(plane)
		return nil, os.RemoveAll(dir)
	}
	var entries []entry
	for _, name := range []string{rotatedName, logName} {
		read, err := readLog(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		entries = append(entries, read...)
	}
	if len(entries) > max {
		entries = entries[len(entries)-max:]
	}
	return entries, nil
}

// readLog reads the events of one log file. A last line cut short by a
// kill is left out.
func readLog(path string) ([]entry, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var entries []entry
	scanner := bufio.NewScanner(bytes.NewReader(data))
	scanner.Buffer(make([]byte, 0, 64<<10), len(data)+1)
	for scanner.Scan() {
		line := scanner.Bytes()
		var head struct {
			StageTimestamp metav1.MicroTime  `json:"stageTimestamp"`
			Annotations    map[string]string `json:"annotations"`
		}
		if err := json.Unmarshal(line, &head); err != nil {
			continue
		}
		cursor, err := strconv.ParseUint(head.Annotations[CursorAnnotation], 10, 64)
		if err != nil {
			continue
		}
		entries = append(entries, entry{cursor: cursor, at: head.StageTimestamp.Time, line: append(bytes.Clone(line), '\n')})
	}
	return entries, scanner.Err()
}

// remove deletes the plane's log.
func (d *disk) remove(plane string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.open.Remove(plane)
	return os.RemoveAll(d.planeDir(plane))
}

// planes returns the planes that have a log, with the uid of their Plane.
func (d *disk) planes() map[string]types.UID {
	out := map[string]types.UID{}
	dirs, err := os.ReadDir(d.dir)
	if err != nil {
		return out
	}
	for _, e := range dirs {
		if !e.IsDir() || planes.ValidateID(e.Name()) != nil {
			continue
		}
		uid, _ := os.ReadFile(filepath.Join(d.dir, e.Name(), uidName))
		out[e.Name()] = types.UID(uid)
	}
	return out
}

func (d *disk) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.open.Clear()
}
