package framework

import (
	"os"
	"path/filepath"
	"testing"
)

// sharedCredentials are the files of a data dir that make servers on one
// datastore one kplane: the CA (so that each server's serving certificate
// is trusted by every client), the service-account signing key (so that a
// token one server issued is valid on another) and the static token file
// (the admin token). Serving and datastore certificates are issued by each
// server from the CA.
var sharedCredentials = []string{"tls/ca.crt", "tls/ca.key", "tls/service-account.key", "tokens.csv"}

// JoinDataDir returns a new data dir holding a copy of from's shared
// credentials, for a second server on from's datastore (the README's
// "Several servers"). It is removed when tb ends.
func JoinDataDir(tb testing.TB, from *Server) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "kplane-e2e-join-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	for _, name := range sharedCredentials {
		data, err := os.ReadFile(filepath.Join(from.DataDir, name))
		if err != nil {
			tb.Fatalf("shared credentials of %s: %v", from.DataDir, err)
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}
