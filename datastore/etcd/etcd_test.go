package etcd

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"syscall"
	"testing"

	"kplane.dev/kplane/datastore/driver"
	"kplane.dev/kplane/server/credentials"
	"kplane.dev/kplane/server/credentials/credtest"
)

// TestTakenPortIsAnAddressInUseError: Start tells a taken port apart from
// other failures (its retry and its callers' depend on it), and a member
// whose first start failed on a taken port starts once the port is free.
func TestTakenPortIsAnAddressInUseError(t *testing.T) {
	dir := t.TempDir()
	certs := credtest.New(t, dir)
	ca := certs.CA
	serverCert, serverKey := certs.Issue("etcd-server", credentials.Leaf{CommonName: "etcd", Server: true, IPs: credtest.Localhost})
	peerCert, peerKey := certs.Issue("etcd-peer", credentials.Leaf{CommonName: PeerCommonName, Server: true, Client: true, IPs: credtest.Localhost})

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		DataDir: filepath.Join(dir, "etcd"),
		TLS:     driver.TLS{CAFile: ca.CertFile, ServerCertFile: serverCert, ServerKeyFile: serverKey},
		Member: &driver.Member{Name: "one", PeerHost: "127.0.0.1", PeerPort: taken.Addr().(*net.TCPAddr).Port,
			PeerCertFile: peerCert, PeerKeyFile: peerKey},
	}
	if _, err := Start(context.Background(), cfg); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("starting on a taken peer port: %v, want an address-in-use error", err)
	}
	taken.Close()
	member, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("starting once the port is free: %v", err)
	}
	member.Close()
}
