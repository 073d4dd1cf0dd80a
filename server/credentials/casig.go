package credentials

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// CASignatureHeader carries, on GET /cacerts, an HMAC-SHA256 of the CA
// certificate keyed with the admin token. A client that holds the admin
// token but not the CA (a CI job next to a kplane service container) can
// then trust the CA without sending its token over an unverified
// connection: only a server that knows the token can sign it.
const CASignatureHeader = "Kplane-Ca-Signature"

// CAJoinSignatureHeader carries, on GET /cacerts of a server started with
// a join token, an HMAC-SHA256 of the CA keyed with the join token: a
// server joining an embedded etcd cluster trusts the CA before it sends
// the token (package server/members).
const CAJoinSignatureHeader = "Kplane-Ca-Join-Signature"

// SignCA returns the signature of caPEM under token (hex).
func SignCA(token string, caPEM []byte) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write(caPEM)
	return hex.EncodeToString(mac.Sum(nil))
}

// VerifyCA reports whether signature is SignCA(token, caPEM).
func VerifyCA(token string, caPEM []byte, signature string) bool {
	got, err := hex.DecodeString(signature)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write(caPEM)
	return hmac.Equal(got, mac.Sum(nil))
}
