package members

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kplane.dev/kplane/datastore/driver"
	"kplane.dev/kplane/datastore/etcd"
	"kplane.dev/kplane/server/credentials"
	"kplane.dev/kplane/server/credentials/credtest"
	"kplane.dev/kplane/server/join"
)

const (
	token   = "0123456789abcdef0123456789abcdef"
	version = "v1.4.0"
)

// cluster is a first member (a real embedded etcd with peer TLS) and a
// server answering the join protocol for it, as a kplane server would.
type cluster struct {
	client *clientv3.Client
	url    string
}

func startCluster(t *testing.T) cluster {
	t.Helper()
	dir := t.TempDir()
	certs := credtest.New(t, dir)
	ca := certs.CA
	localhost := credtest.Localhost
	serverCert, serverKey := certs.Issue("etcd-server", credentials.Leaf{CommonName: "etcd", Server: true, IPs: localhost})
	clientCert, clientKey := certs.Issue("etcd-client", credentials.Leaf{CommonName: "client", Client: true})
	peerCert, peerKey := certs.Issue("etcd-peer", credentials.Leaf{CommonName: etcd.PeerCommonName, Server: true, Client: true, IPs: localhost})
	servingCert, servingKey := certs.Issue("serving", credentials.Leaf{CommonName: "kplane", Server: true, IPs: localhost})

	// The peer port is the test's to pick, so a port taken between the
	// pick and etcd's bind is the test's to pick again.
	var member *etcd.Etcd
	var err error
	for attempt := 1; member == nil; attempt++ {
		member, err = etcd.Start(context.Background(), etcd.Config{
			DataDir: filepath.Join(dir, "etcd"),
			TLS:     driver.TLS{CAFile: ca.CertFile, ServerCertFile: serverCert, ServerKeyFile: serverKey},
			Member: &driver.Member{Name: "one", PeerHost: "127.0.0.1", PeerPort: freePort(t),
				PeerCertFile: peerCert, PeerKeyFile: peerKey},
		})
		if err != nil && (attempt == 3 || !errors.Is(err, syscall.EADDRINUSE)) {
			t.Fatal(err)
		}
	}
	t.Cleanup(member.Close)
	client, err := driver.NewClient(member.Endpoints(), ca.CertFile, clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	record, err := join.Seal(token, version, join.Credentials{CACert: ca.PEM, CAKey: []byte("key"), ServiceAccountKey: []byte("sa"), Tokens: []byte("t")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(context.Background(), join.RecordKey, string(record)); err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc(caCertsPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(credentials.CAJoinSignatureHeader, credentials.SignCA(token, ca.PEM))
		_, _ = w.Write(ca.PEM)
	})
	mux.Handle("/kplane/etcd/", Handler{Token: token, Version: version, Client: client})
	server := httptest.NewUnstartedServer(mux)
	pair, err := tls.LoadX509KeyPair(servingCert, servingKey)
	if err != nil {
		t.Fatal(err)
	}
	server.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	server.StartTLS()
	t.Cleanup(server.Close)
	return cluster{client: client, url: server.URL}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (c cluster) members(t *testing.T) int {
	t.Helper()
	resp, err := c.client.MemberList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Members)
}

// TestJoinSteps: the CA is trusted only when signed with the token; the
// record comes to the token's holder; a learner is added once, however
// often its join is retried; another version is refused before the
// cluster changes; a learner that never starts is not promoted, the wait
// for it is bounded, and it can be removed again, unlike a voting member.
func TestJoinSteps(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()

	if _, err := (Joiner{Server: c.url, Token: strings.Repeat("x", 32), Version: version}).TrustCA(ctx); err == nil ||
		!strings.Contains(err.Error(), "did not sign its CA with this join token") {
		t.Fatalf("a wrong token: %v", err)
	}
	j := Joiner{Server: c.url, Token: token, Version: version}
	caPEM, err := j.TrustCA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	record, err := j.Credentials(ctx, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	if creds, err := join.Open(token, version, record); err != nil || string(creds.CACert) != string(caPEM) {
		t.Fatalf("the record: %v", err)
	}

	other := Joiner{Server: c.url, Token: token, Version: "v1.5.0"}
	peerURL := "https://127.0.0.1:" + strconv.Itoa(freePort(t))
	if _, err := other.Add(ctx, caPEM, AddRequest{Name: "two", PeerURL: peerURL, Version: "v1.5.0"}); err == nil ||
		!strings.Contains(err.Error(), "same minor version") {
		t.Fatalf("another version: %v", err)
	}
	if n := c.members(t); n != 1 {
		t.Fatalf("%d members after a refused join, want 1", n)
	}

	first, err := j.Add(ctx, caPEM, AddRequest{Name: "two", PeerURL: peerURL, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	again, err := j.Add(ctx, caPEM, AddRequest{Name: "two", PeerURL: peerURL, Version: version})
	if err != nil || again.ID != first.ID || c.members(t) != 2 {
		t.Fatalf("a retried join: %v, member %s then %s, %d members", err, first.ID, again.ID, c.members(t))
	}
	if got := first.InitialCluster("two", peerURL); !strings.Contains(got, "two="+peerURL) || !strings.Contains(got, "one=https://127.0.0.1:") {
		t.Fatalf("initial cluster %s", got)
	}

	id, _ := strconv.ParseUint(first.ID, 16, 64)
	bounded, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := j.Promote(bounded, caPEM, id); err == nil || !strings.Contains(err.Error(), "promoting the member") {
		t.Fatalf("promoting a learner that never started: %v", err)
	}

	// The failed join takes its learner away; a voting member stays.
	if err := j.RemoveLearner(ctx, caPEM, id); err != nil || c.members(t) != 1 {
		t.Fatalf("removing the learner: %v, %d members", err, c.members(t))
	}
	status, err := c.client.Status(ctx, c.client.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := j.RemoveLearner(ctx, caPEM, status.Header.MemberId); err == nil || !strings.Contains(err.Error(), "only a learner") || c.members(t) != 1 {
		t.Fatalf("removing a voting member: %v, %d members", err, c.members(t))
	}
}

// TestRequestsNeedTheToken: without the token every request is 401, a
// Kubernetes Status.
func TestRequestsNeedTheToken(t *testing.T) {
	c := startCluster(t)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, path := range []string{CredentialsPath, MembersPath, PromotePath} {
		req, _ := http.NewRequest(http.MethodPost, c.url+path, strings.NewReader("{}"))
		req.Header.Set(TokenHeader, "wrong")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var status metav1.Status
		err = json.NewDecoder(resp.Body).Decode(&status)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || err != nil || status.Reason != metav1.StatusReasonUnauthorized {
			t.Errorf("%s with a wrong token: %d %+v %v", path, resp.StatusCode, status, err)
		}
	}
}
