package kplanetest

import "syscall"

// dieWithParent: kplane releases no Windows server; a binary given
// explicitly runs with default attributes.
func dieWithParent() *syscall.SysProcAttr { return nil }
