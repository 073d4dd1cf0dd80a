package credentials

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

func servingLeaf() Leaf {
	return Leaf{CommonName: "kplane", DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	certs, err := certutil.CertsFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

// writeLeaf writes a certificate for leaf signed by ca with the given
// validity, as an earlier kplane (or a short-lived test setting) would have.
func writeLeaf(t *testing.T, ca *CA, certFile, keyFile string, leaf Leaf, notBefore, notAfter time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := randomSerial()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: leaf.CommonName},
		NotBefore: notBefore, NotAfter: notAfter, DNSNames: leaf.DNSNames, IPAddresses: leaf.IPs,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeKeyPair(certFile, keyFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key); err != nil {
		t.Fatal(err)
	}
}

// A leaf is kept until a third of its lifetime remains, then reissued.
func TestRenewerRenewsWhenAThirdOfTheLifetimeRemains(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	r := NewRenewer(ca, Issued{CertFile: certFile, KeyFile: keyFile, Leaf: servingLeaf()})
	start := time.Now()
	r.now = func() time.Time { return start }
	due, err := r.EnsureAll()
	if err != nil {
		t.Fatal(err)
	}
	first := readCert(t, certFile)
	if lifetime := first.NotAfter.Sub(first.NotBefore); lifetime < 360*24*time.Hour {
		t.Fatalf("leaf lifetime %s, want a year", lifetime)
	}
	if want := first.NotAfter.Add(-first.NotAfter.Sub(first.NotBefore) / 3); !due.Equal(want) {
		t.Fatalf("next renewal %s, want %s (a third of the lifetime before expiry)", due, want)
	}

	r.now = func() time.Time { return due.Add(-time.Minute) }
	if _, err := r.EnsureAll(); err != nil {
		t.Fatal(err)
	}
	if !readCert(t, certFile).Equal(first) {
		t.Fatal("renewed before it was due")
	}

	r.now = func() time.Time { return due.Add(time.Minute) }
	next, err := r.EnsureAll()
	if err != nil {
		t.Fatal(err)
	}
	renewed := readCert(t, certFile)
	if renewed.Equal(first) || !renewed.NotAfter.After(first.NotAfter) {
		t.Fatalf("not renewed when due: NotAfter %s -> %s", first.NotAfter, renewed.NotAfter)
	}
	if !next.After(due) {
		t.Fatalf("next renewal %s not after the previous one %s", next, due)
	}
	if got := r.Expiries(); len(got) != 2 || got[1].Name != "serving.crt" || !got[1].NotAfter.Equal(renewed.NotAfter) {
		t.Fatalf("expiries %v", got)
	}
}

// Run renews a certificate that falls due while it runs, without being
// asked again.
func TestRenewerRunRenewsWhileRunning(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	now := time.Now()
	// Due in about two seconds: a third of its 9s lifetime remains then.
	writeLeaf(t, ca, certFile, keyFile, servingLeaf(), now.Add(-4*time.Second), now.Add(5*time.Second))
	short := readCert(t, certFile)
	r := NewRenewer(ca, Issued{CertFile: certFile, KeyFile: keyFile, Leaf: servingLeaf()})
	if _, err := r.EnsureAll(); err != nil {
		t.Fatal(err)
	}
	if !readCert(t, certFile).Equal(short) {
		t.Fatal("a certificate not yet due was renewed at start")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for readCert(t, certFile).Equal(short) {
		if time.Now().After(deadline) {
			t.Fatal("Run did not renew the certificate when it fell due")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if renewed := readCert(t, certFile); time.Until(renewed.NotAfter) < 300*24*time.Hour {
		t.Fatalf("renewed certificate expires %s", renewed.NotAfter)
	}
}

func TestCertificatesReadyzCheck(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRenewer(ca, Issued{CertFile: filepath.Join(dir, "serving.crt"), KeyFile: filepath.Join(dir, "serving.key"), Leaf: servingLeaf()})
	if _, err := r.EnsureAll(); err != nil {
		t.Fatal(err)
	}
	check := r.ReadyzCheck()
	if check.GroupName() != "certificates" {
		t.Fatalf("group %q", check.GroupName())
	}
	serving := readCert(t, filepath.Join(dir, "serving.crt"))
	for _, want := range []string{"certificates (", "ca.crt until " + ca.Cert.NotAfter.UTC().Format(time.RFC3339),
		"serving.crt until " + serving.NotAfter.UTC().Format(time.RFC3339)} {
		if !strings.Contains(check.Name(), want) {
			t.Errorf("check name %q lacks %q", check.Name(), want)
		}
	}
	if err := check.Check(nil); err != nil {
		t.Fatalf("fresh certificates: %v", err)
	}
	r.now = func() time.Time { return serving.NotAfter }
	if err := check.Check(nil); err == nil || !strings.Contains(err.Error(), "serving.crt expired") || strings.Contains(err.Error(), "ca.crt") {
		t.Fatalf("an expired serving certificate: %v", err)
	}
	r.now = func() time.Time { return ca.Cert.NotAfter.Add(time.Second) }
	if err := check.Check(nil); err == nil || !strings.Contains(err.Error(), "ca.crt expired") {
		t.Fatalf("an expired CA: %v", err)
	}
}
