package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestCertificateRenewalWhileRunning: a server whose serving certificate
// falls due for renewal while it runs presents a renewed one, without a
// restart, and /readyz?verbose says when its certificates expire.
func TestCertificateRenewalWhileRunning(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	s.Stop()

	// Replace the serving certificate with one signed by the same CA for the
	// same names that falls due (a third of its lifetime left) 45s from now:
	// long enough for the restart, short enough to happen while it runs.
	now := time.Now()
	short := writeServingCert(t, s.DataDir, now.Add(-105*time.Second), now.Add(120*time.Second))
	renewalDue := now.Add(45 * time.Second)
	s.Restart(t)

	first := presentedCert(t, s)
	if !first.Equal(short) {
		t.Fatalf("the server renewed the serving certificate at start-up (it took %s to start; renewal was due at %s): the test cannot see a renewal while running",
			time.Since(now).Round(time.Second), renewalDue.Format(time.RFC3339))
	}
	framework.Eventually(t, time.Until(renewalDue)+framework.DefaultTimeout, "a renewed serving certificate presented", func(context.Context) error {
		if s.ExitCode() != -1 {
			return framework.Stop(fmt.Errorf("the server exited (%d)", s.ExitCode()))
		}
		if cert := presentedCert(t, s); cert.NotAfter.Equal(short.NotAfter) {
			return fmt.Errorf("still presenting the certificate valid until %s", cert.NotAfter)
		}
		return nil
	})
	renewed := presentedCert(t, s)
	if time.Until(renewed.NotAfter) < 300*24*time.Hour || renewed.Subject.CommonName != short.Subject.CommonName {
		t.Fatalf("renewed certificate %s valid until %s", renewed.Subject, renewed.NotAfter)
	}
	if !strings.Contains(s.Log(), "certificate renewed") {
		t.Error("the server did not log the renewal")
	}

	status, body := adminGet(t, s, "/readyz?verbose")
	caCert := readCertFile(t, filepath.Join(s.DataDir, "tls", "ca.crt"))
	for _, want := range []string{
		"[+]certificates (",
		"serving.crt until " + renewed.NotAfter.UTC().Format(time.RFC3339),
		"ca.crt until " + caCert.NotAfter.UTC().Format(time.RFC3339),
	} {
		if status != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/readyz?verbose: %d, lacks %q:\n%s", status, want, body)
		}
	}
	if status, body := adminGet(t, s, "/readyz/certificates"); status != http.StatusOK || body != "ok" {
		t.Errorf("/readyz/certificates: %d %s", status, body)
	}
	if status, body := adminGet(t, s, "/readyz?verbose&exclude=certificates"); status != http.StatusOK || !strings.Contains(body, "excluded with certificates") {
		t.Errorf("/readyz?exclude=certificates: %d\n%s", status, body)
	}
}

func readCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	certs, err := certutil.CertsFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

// writeServingCert writes into dataDir a serving certificate like the one
// there (names, usages), signed by the data dir's CA, with the validity
// given, and returns it.
func writeServingCert(t *testing.T, dataDir string, notBefore, notAfter time.Time) *x509.Certificate {
	t.Helper()
	tlsDir := filepath.Join(dataDir, "tls")
	current := readCertFile(t, filepath.Join(tlsDir, "serving.crt"))
	caCert := readCertFile(t, filepath.Join(tlsDir, "ca.crt"))
	caKey, err := keyutil.PrivateKeyFromFile(filepath.Join(tlsDir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      current.Subject,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     current.KeyUsage,
		ExtKeyUsage:  current.ExtKeyUsage,
		DNSNames:     current.DNSNames,
		IPAddresses:  current.IPAddresses,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tlsDir, "serving.key"), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tlsDir, "serving.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// presentedCert is the certificate the server presents in a new TLS
// handshake, verified against the server's CA.
func presentedCert(t *testing.T, s *framework.Server) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CAPEM())
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// adminGet GETs a path of the server as the admin.
func adminGet(t *testing.T, s *framework.Server, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.AdminToken())
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
