package framework

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
)

// NewJoinToken returns a random join token (--join-token): servers started
// with it on one datastore share one CA, signing key and token file, which
// the first stores in the datastore (README, "Several servers").
func NewJoinToken(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}
