package credentials

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestCAAndLeafReuse(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	leaf := Leaf{CommonName: "kplane", DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true}
	cert, key := filepath.Join(dir, "s.crt"), filepath.Join(dir, "s.key")
	if err := ca.Ensure(cert, key, leaf); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(cert)

	again, err := EnsureCA(dir)
	if err != nil || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("CA not reused: %v", err)
	}
	if err := again.Ensure(cert, key, leaf); err != nil {
		t.Fatal(err)
	}
	if second, _ := os.ReadFile(cert); string(second) != string(first) {
		t.Fatal("serving certificate reissued although it covers the names")
	}
	leaf.DNSNames = append(leaf.DNSNames, "kplane.example")
	if err := again.Ensure(cert, key, leaf); err != nil {
		t.Fatal(err)
	}
	if third, _ := os.ReadFile(cert); string(third) == string(first) {
		t.Fatal("serving certificate not reissued for a new SAN")
	}
	if st, _ := os.Stat(key); st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", st.Mode())
	}
}

func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.csv")
	tok, err := EnsureTokenFile(path, "")
	if err != nil || len(tok) < 32 {
		t.Fatalf("token %q, %v", tok, err)
	}
	again, err := EnsureTokenFile(path, "")
	if err != nil || again != tok {
		t.Fatalf("token not reused: %q %v", again, err)
	}
	bad := filepath.Join(t.TempDir(), "tokens.csv")
	os.WriteFile(bad, []byte("abc,user,uid,\"dev\"\n"), 0o600)
	if _, err := EnsureTokenFile(bad, ""); err == nil {
		t.Fatal("want error for a token file without an admin entry")
	}
}

func TestPresetAdminToken(t *testing.T) {
	preset := "0123456789abcdef0123456789abcdef-ci"
	if err := ValidateAdminToken(preset); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"short", preset + ",x", preset + " x", preset + "\"x"} {
		if ValidateAdminToken(bad) == nil {
			t.Errorf("admin token %q accepted", bad)
		}
	}
	path := filepath.Join(t.TempDir(), "tokens.csv")
	tok, err := EnsureTokenFile(path, preset)
	if err != nil || tok != preset {
		t.Fatalf("token %q, %v", tok, err)
	}
	if again, err := EnsureTokenFile(path, preset); err != nil || again != preset {
		t.Fatalf("preset token not found again: %q %v", again, err)
	}
	if again, err := EnsureTokenFile(path, ""); err != nil || again != preset {
		t.Fatalf("without a preset the file's admin token is used: %q %v", again, err)
	}
	if _, err := EnsureTokenFile(path, preset+"-other"); err == nil {
		t.Fatal("a different preset token must be refused, not silently ignored")
	}
}

func TestCASignature(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	sig := SignCA("the-admin-token", ca)
	if !VerifyCA("the-admin-token", ca, sig) {
		t.Fatal("own signature does not verify")
	}
	if VerifyCA("another-token", ca, sig) {
		t.Fatal("signature verifies with another token")
	}
	if VerifyCA("the-admin-token", append([]byte("x"), ca...), sig) {
		t.Fatal("signature verifies for another CA")
	}
	if VerifyCA("the-admin-token", ca, "zz") || VerifyCA("the-admin-token", ca, "") {
		t.Fatal("malformed signature verifies")
	}
}
