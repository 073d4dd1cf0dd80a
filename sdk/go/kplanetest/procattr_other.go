//go:build unix && !linux

package kplanetest

import "syscall"

// dieWithParent puts the server in its own process group; only Linux can
// also kill it when the test binary dies without running Stop.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
