package join

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Files are where a server keeps the shared credentials.
type Files struct {
	CACert, CAKey, ServiceAccountKey, Tokens string
}

func (f Files) paths() []*string {
	return []*string{&f.CACert, &f.CAKey, &f.ServiceAccountKey, &f.Tokens}
}

func (c *Credentials) fields() []*[]byte {
	return []*[]byte{&c.CACert, &c.CAKey, &c.ServiceAccountKey, &c.Tokens}
}

// Read returns the credentials in the files; a missing file is nil.
func (f Files) Read() (Credentials, error) {
	var c Credentials
	fields := c.fields()
	for i, path := range f.paths() {
		data, err := os.ReadFile(*path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return Credentials{}, fmt.Errorf("reading %s: %w", *path, err)
		}
		*fields[i] = data
	}
	return c, nil
}

// Write writes every credential into its file, replacing what is there.
func (f Files) Write(c Credentials) error {
	fields := c.fields()
	for i, path := range f.paths() {
		if err := writeAtomically(*path, *fields[i]); err != nil {
			return err
		}
	}
	return nil
}

// complete reports whether every credential is there.
func (c Credentials) complete() bool {
	for _, field := range c.fields() {
		if len(*field) == 0 {
			return false
		}
	}
	return true
}

// writeAtomically replaces path with data (mode 0600): a server killed
// half-way leaves the old file or the new one, never a torn key.
func writeAtomically(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
