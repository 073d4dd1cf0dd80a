package apiserver

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuildGenericConfigFollowsUpstream: buildGenericConfig and
// applySecureServing repeat upstream functions step for step; each
// Kubernetes update that changes one of those must be carried over. The
// upstream functions are read from the module sources this module builds
// with and compared with what they were when last carried over.
func TestBuildGenericConfigFollowsUpstream(t *testing.T) {
	followed := []struct {
		module, file, receiver, function, sum, ours string
	}{
		{"k8s.io/kubernetes", "pkg/controlplane/apiserver/config.go", "", "BuildGenericConfig",
			"20d4b1e608379637a41fa828a7c22c8f412d087ce637023cd3eb9de2632ec8a1", "buildGenericConfig (genericconfig.go)"},
		{"k8s.io/apiserver", "pkg/server/options/serving_with_loopback.go", "SecureServingOptionsWithLoopback", "applyTo",
			"924ad234a8bb78f582f6a873a261bfbe281e288e954eeccf2df8e25ab713c1e4", "applySecureServing (loopbackcert.go)"},
	}
	for _, f := range followed {
		dir := moduleDir(t, f.module)
		sum := functionSum(t, filepath.Join(dir, f.file), f.receiver, f.function)
		if sum != f.sum {
			t.Errorf("%s %s changed in %s (sha256 of its source %s, was %s): bring %s in step, then record the new sum here",
				f.module, f.function, dir, sum, f.sum, f.ours)
		}
	}
}

// moduleDir is where the go command has the sources of module.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatalf("go list -m %s: no source directory (modules not downloaded?)", module)
	}
	return dir
}

// functionSum is the sha256 of a function's source as gofmt prints it
// (receiver "" for a function, else the method's receiver type).
func functionSum(t *testing.T, path, receiver, name string) string {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != name || receiverName(fn) != receiver {
			continue
		}
		var src bytes.Buffer
		if err := printer.Fprint(&src, fset, fn); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(src.Bytes())
		return hex.EncodeToString(sum[:])
	}
	t.Fatalf("%s: no function %s (receiver %q)", path, name, receiver)
	return ""
}

func receiverName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if ident, ok := typ.(*ast.Ident); ok {
		return ident.Name
	}
	return ""
}

// TestLoopbackCertificate: the loopback certificate verifies as its own
// CA for the loopback name, for the time it says, and its key is its own.
func TestLoopbackCertificate(t *testing.T) {
	notAfter := time.Now().Add(loopbackValidity)
	certPEM, keyPEM, err := loopbackCertificate("apiserver-loopback-client", notAfter)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	for _, at := range []time.Time{time.Now(), notAfter.Add(-time.Minute)} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: "apiserver-loopback-client", Roots: roots, CurrentTime: at}); err != nil {
			t.Errorf("at %s: %v", at, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "apiserver-loopback-client", Roots: roots, CurrentTime: notAfter.Add(time.Minute)}); err == nil {
		t.Error("verifies after its end")
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "kubernetes", Roots: roots}); err == nil {
		t.Error("verifies for a name other than the loopback's")
	}
}
