package credentials

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// leafValidity is the lifetime of the certificates the CA issues; they
// are renewed while the server runs (RenewalTime).
const leafValidity = 365 * 24 * time.Hour

// RenewalTime is when a leaf certificate is reissued: once less than a third
// of its lifetime remains (about four months ahead for the one-year leaves
// kplane issues), so that a server that missed a renewal check, or a client
// with a skewed clock, still has months to spare.
func RenewalTime(cert *x509.Certificate) time.Time {
	lifetime := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotAfter.Add(-lifetime / 3)
}

// CA is the kplane certificate authority.
type CA struct {
	Cert     *x509.Certificate
	Key      crypto.Signer
	CertFile string
	KeyFile  string
	// PEM is the CA certificate, to embed in kubeconfigs.
	PEM []byte
}

// EnsureCA loads the CA from dir, creating it on first use.
func EnsureCA(dir string) (*CA, error) {
	certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if certPEM, err := os.ReadFile(certFile); err == nil {
		cert, key, err := load(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading CA: %w", err)
		}
		return &CA{Cert: cert, Key: key, CertFile: certFile, KeyFile: keyFile, PEM: certPEM}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	// Ten years, as every Kubernetes CA; valid from an hour ago so that a
	// client whose clock lags a little accepts it.
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{
		CommonName: fmt.Sprintf("kplane-ca@%d", now.Unix()),
		NotBefore:  now.Add(-time.Hour),
	}, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	certPEM, err := certutil.EncodeCertificates(cert)
	if err != nil {
		return nil, err
	}
	if err := writeKeyPair(certFile, keyFile, certPEM, key); err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertFile: certFile, KeyFile: keyFile, PEM: certPEM}, nil
}

// Leaf describes a certificate the CA issues.
type Leaf struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Server       bool
	Client       bool
}

// Ensure issues certFile/keyFile for leaf unless a certificate signed by
// this CA with at least the requested names, and not yet due for renewal
// (RenewalTime), already exists.
func (ca *CA) Ensure(certFile, keyFile string, leaf Leaf) error {
	_, err := ca.ensure(certFile, keyFile, leaf, time.Now())
	return err
}

// ensure is Ensure at now; it returns the certificate in certFile.
func (ca *CA) ensure(certFile, keyFile string, leaf Leaf, now time.Time) (*x509.Certificate, error) {
	if cert, _, err := load(certFile, keyFile); err == nil && ca.covers(cert, leaf, now) {
		return cert, nil
	}
	return ca.issue(certFile, keyFile, leaf, now)
}

// issue signs a new leaf. certutil makes only self-signed certificates, so
// the template of a CA-signed one is built here.
func (ca *CA) issue(certFile, keyFile string, leaf Leaf, now time.Time) (*x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: leaf.CommonName, Organization: leaf.Organization},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     leaf.DNSNames,
		IPAddresses:  leaf.IPs,
	}
	if leaf.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if leaf.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	certPEM, err := certutil.EncodeCertificates(cert)
	if err != nil {
		return nil, err
	}
	return cert, writeKeyPair(certFile, keyFile, certPEM, key)
}

func (ca *CA) covers(cert *x509.Certificate, leaf Leaf, now time.Time) bool {
	if cert.CheckSignatureFrom(ca.Cert) != nil || !now.Before(RenewalTime(cert)) {
		return false
	}
	if cert.Subject.CommonName != leaf.CommonName || !slices.Equal(cert.Subject.Organization, leaf.Organization) {
		return false
	}
	for _, name := range leaf.DNSNames {
		if !slices.Contains(cert.DNSNames, name) {
			return false
		}
	}
	for _, ip := range leaf.IPs {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// EnsureSigningKey loads the private key at path, creating it on first use.
func EnsureSigningKey(path string) (crypto.Signer, error) {
	if data, err := os.ReadFile(path); err == nil {
		key, err := keyutil.ParsePrivateKeyPEM(data)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", path, err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s: not a signing key", path)
		}
		return signer, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, err
	}
	return key, writeFile(path, keyPEM, 0o600)
}

func load(certFile, keyFile string) (*x509.Certificate, crypto.Signer, error) {
	certs, err := certutil.CertsFromFile(certFile)
	if err != nil {
		return nil, nil, err
	}
	cert := certs[0]
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not a signing key", keyFile)
	}
	return cert, signer, nil
}

func writeKeyPair(certFile, keyFile string, certPEM []byte, key *ecdsa.PrivateKey) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	if err := writeFile(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(certFile, certPEM, 0o644)
}

// writeFile writes atomically: a crash never leaves a half-written file.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// sameBytes reports whether path already holds data.
func sameBytes(path string, data []byte) bool {
	existing, err := os.ReadFile(path)
	return err == nil && bytes.Equal(existing, data)
}
