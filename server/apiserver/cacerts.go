package apiserver

import (
	"net/http"

	"kplane.dev/kplane/server/credentials"
)

// caCertsPath serves the kplane CA without credentials, so that a client
// holding only the admin token (a CI job next to a kplane service
// container) can learn which CA to trust before it sends the token.
const caCertsPath = "/cacerts"

// etcdMembersPrefix is where the join requests of an embedded etcd
// cluster are served (Config.EtcdMembers).
const etcdMembersPrefix = "/kplane/etcd/"

// caCertsHandler serves caPEM with its signatures (credentials.SignCA)
// under the admin token and the join token; the client checks the one of
// the token it holds, so a server in the middle cannot hand it another CA.
func caCertsHandler(caPEM []byte, signature, joinSignature string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if signature != "" {
			w.Header().Set(credentials.CASignatureHeader, signature)
		}
		if joinSignature != "" {
			w.Header().Set(credentials.CAJoinSignatureHeader, joinSignature)
		}
		w.Header().Set("Content-Type", "application/x-pem-file")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(caPEM)
	})
}
