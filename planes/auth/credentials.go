package auth

import "net/http"

// HasCredentials reports whether req presents credentials to
// authenticate: an Authorization header (bearer token, basic) or a client
// certificate (also a front proxy's).
func HasCredentials(req *http.Request) bool {
	return req.Header.Get("Authorization") != "" || (req.TLS != nil && len(req.TLS.PeerCertificates) > 0)
}
