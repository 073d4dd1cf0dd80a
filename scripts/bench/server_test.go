package main

import (
	"errors"
	"net"
	"os"
	"testing"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestServerOnATakenPort: a server whose port another process holds is
// reported as such at once (startServerOnFreePort then picks another),
// not after the two minutes a server that never gets ready is given.
func TestServerOnATakenPort(t *testing.T) {
	binary := os.Getenv("KPLANE_BINARY")
	framework.Require(t, binary != "", "KPLANE_BINARY is not set: run it through 'make test', or 'make test-unit' for the unit tests without it")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	s, err := startServerIn(binary, t.TempDir(), taken.Addr().(*net.TCPAddr).Port)
	if err == nil {
		s.stop()
		t.Fatal("a server started on a port another process holds")
	}
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("a server on a taken port: %v, want errPortTaken", err)
	}
}
