package server

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// checkWritable fails with one line saying what to do when this process
// cannot write dir: typically a container run as another numeric user than
// the one owning its volume, where the alternative is an error on the first
// file written deep inside start-up.
func checkWritable(dir string) error {
	const writeAndSearch = 0x2 | 0x1 // access(2): W_OK | X_OK
	err := syscall.Access(dir, writeAndSearch)
	if err == nil {
		return nil
	}
	info, statErr := os.Stat(dir)
	if st, ok := statInfo(info, statErr); ok {
		return fmt.Errorf("data dir %s is not writable by uid %d (it belongs to uid %d): run kplane as uid %d (in a container: the image's default user, without --user) or give the directory to uid %d",
			dir, os.Getuid(), st.Uid, st.Uid, os.Getuid())
	}
	return fmt.Errorf("data dir %s is not usable by uid %d: %w", dir, os.Getuid(), err)
}

func statInfo(info os.FileInfo, err error) (*syscall.Stat_t, bool) {
	if err != nil {
		return nil, false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	return st, ok
}

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
