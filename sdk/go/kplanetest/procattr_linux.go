package kplanetest

import "syscall"

// dieWithParent makes the server die with the test binary however the
// binary ends (a panic, a timeout, kill -9), so no server outlives it.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
