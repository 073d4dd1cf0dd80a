package server

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive lock on dir for the life of the process:
// two servers on one data dir would share its datastore, sockets and
// credentials and break each other, so the second one refuses to start.
// The kernel drops the lock when the process exits, kill -9 included.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "kplane.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid := string(bytes.TrimSpace(holder))
			if pid != "" {
				pid = " (pid " + pid + ")"
			}
			return nil, fmt.Errorf("data dir %s is in use by another kplane server%s", dir, pid)
		}
		return nil, fmt.Errorf("locking data dir %s: %w", dir, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	}
	return f, nil
}
