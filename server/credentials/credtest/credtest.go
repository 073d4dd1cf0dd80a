package credtest

import (
	"net"
	"path/filepath"
	"testing"

	"kplane.dev/kplane/server/credentials"
)

// Localhost is the address the tests' servers listen on.
var Localhost = []net.IP{net.ParseIP("127.0.0.1")}

// Issuer issues leaf certificates from a CA in a test's temporary
// directory.
type Issuer struct {
	t   testing.TB
	dir string
	// CA is the issuing CA; its CertFile is what peers trust.
	CA *credentials.CA
}

// New makes a CA in dir.
func New(t testing.TB, dir string) *Issuer {
	t.Helper()
	ca, err := credentials.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &Issuer{t: t, dir: dir, CA: ca}
}

// Issue writes name.crt and name.key for leaf into the directory and
// returns their paths.
func (i *Issuer) Issue(name string, leaf credentials.Leaf) (cert, key string) {
	i.t.Helper()
	cert, key = filepath.Join(i.dir, name+".crt"), filepath.Join(i.dir, name+".key")
	if err := i.CA.Ensure(cert, key, leaf); err != nil {
		i.t.Fatal(err)
	}
	return cert, key
}
