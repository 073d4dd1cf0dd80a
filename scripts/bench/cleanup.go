package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cleanupOnSignal makes every temporary directory of this run (the
// scenarios' data directories, the servers' own temp files) live under one
// root, and on SIGINT or SIGTERM kills every process the benchmark started
// and removes that root before exiting. The returned func removes the root
// on a normal exit; it may be called more than once.
//
// Scenarios stop their processes with defers when they return, and each
// child carries a parent-death signal, so a benchmark killed outright
// still leaves no server behind; this covers the interrupt, where defers
// do not run.
func cleanupOnSignal() func() {
	root, err := os.MkdirTemp("", "kplane-bench-run-")
	if err != nil {
		return func() {}
	}
	oldTmp, hadTmp := os.LookupEnv("TMPDIR")
	os.Setenv("TMPDIR", root)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	var once sync.Once
	remove := func() {
		once.Do(func() {
			signal.Stop(signals)
			if hadTmp {
				os.Setenv("TMPDIR", oldTmp)
			} else {
				os.Unsetenv("TMPDIR")
			}
			os.RemoveAll(root)
		})
	}
	go func() {
		sig, ok := <-signals
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "bench: %s: stopping every process started and removing %s\n", sig, root)
		killChildren()
		remove()
		os.Exit(130)
	}()
	return remove
}

// killChildren kills this process's children (servers, kube-apiservers,
// etcd, a go build of the baseline) and gives them a moment to go.
func killChildren() {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var killed []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parent(pid) == self {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed = append(killed, pid)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range killed {
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && parent(pid) == self {
			// Reap it so that /proc forgets it.
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func parent(pid int) int {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; the fields after its
	// closing parenthesis are state, ppid, ...
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}
