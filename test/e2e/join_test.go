package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"kplane.dev/kplane/server/join"
	"kplane.dev/kplane/test/e2e/framework"
)

// TestJoinToken: a second server on the first's etcd with the same join
// token and an empty data dir takes the first's CA, signing key and token
// file from the datastore: one CA trusts both servers (the second with its
// own --tls-san), the admin token and a service-account token minted on
// the first work on the second, and the datastore holds them sealed only.
// Then what must be refused is, with one line and a non-zero exit, the
// running servers unaffected: a wrong token, a data dir of another kplane,
// a record of another kplane version, an unreachable datastore.
func TestJoinToken(t *testing.T) {
	t.Parallel()
	endpoint := framework.StartEtcd(t)
	token := framework.NewJoinToken(t)
	args := []string{"--datastore-endpoint", endpoint, "--join-token", token}
	one := framework.StartServer(t, framework.Options{Args: args})
	two := framework.StartServer(t, framework.Options{Args: append([]string{"--disable-controllers", "--simulation=false",
		"--tls-san", "kplane-2.example"}, args...)})

	assertOneKplane(t, one, two)
	assertRecordSealed(t, endpoint, one)

	t.Run("wrong token", func(t *testing.T) {
		dir := t.TempDir()
		refusedStart(t, dir, "the join token does not open the shared credentials",
			"--datastore-endpoint", endpoint, "--join-token", framework.NewJoinToken(t))
		if _, err := os.Stat(filepath.Join(dir, "tls")); !os.IsNotExist(err) {
			t.Errorf("the refused server wrote credentials into its data dir: %v", err)
		}
		assertServing(t, one, two)
	})

	t.Run("data dir of another kplane", func(t *testing.T) {
		dir := t.TempDir()
		otherCA := writeCA(t, filepath.Join(dir, "tls"))
		refusedStart(t, dir, "holds another CA", args...)
		if got, _ := os.ReadFile(filepath.Join(dir, "tls", "ca.crt")); !bytes.Equal(got, otherCA) {
			t.Error("the refused data dir's CA was changed")
		}
		assertServing(t, one, two)
	})

	t.Run("another kplane version", func(t *testing.T) {
		version := storeRecordOfAnotherVersion(t, etcdClient(t, endpoint), token)
		refusedStart(t, t.TempDir(), "stored by kplane v999.1.0, this server is kplane "+version, args...)
		assertServing(t, one, two)
	})

	// A datastore that serves a kplane but holds no record: its servers
	// run without a token, and a new server must not make a CA of its own.
	t.Run("a kplane without a record", func(t *testing.T) {
		kv := etcdClient(t, endpoint)
		ctx := context.Background()
		original := recordOf(t, kv)
		if _, err := kv.Delete(ctx, join.RecordKey); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, err := kv.Put(ctx, join.RecordKey, string(original)); err != nil {
				t.Error(err)
			}
		}()
		dir := t.TempDir()
		refusedStart(t, dir, "restart its first server with the same --join-token", args...)
		if _, err := os.Stat(filepath.Join(dir, "tls")); !os.IsNotExist(err) {
			t.Errorf("the refused server made credentials: %v", err)
		}
	})

	t.Run("unreachable datastore", func(t *testing.T) {
		port, err := framework.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		refusedStart(t, t.TempDir(), "is unreachable", "--datastore-endpoint", "http://127.0.0.1:"+strconv.Itoa(port), "--join-token", token)
	})

	// A joined server restarted on its data dir finds the datastore's
	// credentials there and goes on.
	two.Stop()
	two.Restart(t)
	assertServing(t, one, two)
	if !strings.Contains(two.Log(), "joined: the data dir holds the datastore's shared credentials") {
		t.Error("the restarted server did not find its credentials matching the datastore's")
	}
}

// assertOneKplane: the second server presents a certificate of the first's
// CA with its own name, and accepts the first's admin token and a token
// minted on the first for a service account of a plane.
func assertOneKplane(t *testing.T, one, two *framework.Server) {
	t.Helper()
	if !bytes.Equal(one.CAPEM(), two.CAPEM()) || one.AdminToken() != two.AdminToken() {
		t.Fatal("the second server's admin kubeconfig has another CA or admin token than the first's")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(one.CAPEM())
	conn, err := tls.Dial("tcp", strings.TrimPrefix(two.URL, "https://"), &tls.Config{RootCAs: pool, ServerName: "kplane-2.example"})
	if err != nil {
		t.Fatalf("the second server's certificate under the first's CA, as kplane-2.example: %v", err)
	}
	conn.Close()

	const plane = "joined"
	createPlane(t, one, plane, "")
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}
	if _, err := one.Client(t, plane).CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := one.Client(t, plane).CoreV1().ServiceAccounts("default").CreateToken(ctx, "robot", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for who, bearer := range map[string]string{
		"kplane-admin":                        one.AdminToken(),
		"system:serviceaccount:default:robot": tr.Status.Token,
	} {
		cfg := one.RESTConfig(plane)
		cfg.Host, cfg.BearerToken = two.PlaneURL(plane), bearer
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, framework.DefaultTimeout, who+"'s token from the first server accepted by the second", func(ctx context.Context) error {
			review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if got := review.Status.UserInfo.Username; got != who {
				return framework.Stop(fmt.Errorf("authenticated as %q, want %q", got, who))
			}
			return nil
		})
	}
}

// assertRecordSealed: the datastore's record holds none of the
// credentials in clear (PEM, base64 of PEM, the admin token).
func assertRecordSealed(t *testing.T, endpoint string, one *framework.Server) {
	t.Helper()
	record := recordOf(t, etcdClient(t, endpoint))
	for _, clear := range []string{"BEGIN", "LS0tLS1CRUdJTi", one.AdminToken()} {
		if bytes.Contains(record, []byte(clear)) {
			t.Fatalf("the datastore's record holds %q in clear", clear)
		}
	}
}

// refusedStart starts `kplane server` on dir and fails unless it exits
// non-zero within a minute, its whole output being one line that refuses
// the start and says want.
func refusedStart(t *testing.T, dir, want string, args ...string) {
	t.Helper()
	bin, _ := framework.Binary()
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"server", "--data-dir", dir, "--bind-address", "127.0.0.1",
		"--https-port", strconv.Itoa(port)}, args...)...)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err == nil || cmd.ProcessState == nil || cmd.ProcessState.ExitCode() <= 0 {
		t.Fatalf("the server was not refused (%v):\n%s", err, out)
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "kplane: refusing to start: ") || !strings.Contains(lines[0], want) {
		t.Fatalf("want one line refusing the start with %q, got %d lines:\n%s", want, len(lines), out)
	}
}

// assertServing: the running servers answer.
func assertServing(t *testing.T, servers ...*framework.Server) {
	t.Helper()
	for i, s := range servers {
		if _, err := s.Client(t, "root").CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("server %d after the refused start: %v", i+1, err)
		}
	}
}

func etcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recordOf(t *testing.T, kv clientv3.KV) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kv.Get(ctx, join.RecordKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("no record at %s", join.RecordKey)
	}
	return resp.Kvs[0].Value
}

// writeCA writes a new self-signed CA into dir, as another kplane's data
// dir holds, and returns its certificate.
func writeCA(t *testing.T, dir string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "another-kplane-ca"}, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := certutil.EncodeCertificates(cert)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"ca.crt": certPEM, "ca.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certPEM
}

// storeRecordOfAnotherVersion replaces the credentials record with the
// same credentials sealed by kplane v999.1.0, puts the original back when
// the test ends, and returns the version that stored the original.
func storeRecordOfAnotherVersion(t *testing.T, kv clientv3.KV, token string) string {
	t.Helper()
	original := recordOf(t, kv)
	var header struct{ KplaneVersion string }
	if err := json.Unmarshal(original, &header); err != nil {
		t.Fatal(err)
	}
	creds, err := join.Open(token, header.KplaneVersion, original)
	if err != nil {
		t.Fatal(err)
	}
	future, err := join.Seal(token, "v999.1.0", creds)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := kv.Put(ctx, join.RecordKey, string(future)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := kv.Put(ctx, join.RecordKey, string(original)); err != nil {
			t.Error(err)
		}
	})
	return header.KplaneVersion
}
