package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kplane.dev/kplane/test/e2e/framework"
)

// What an operator runs: JSON logs, a manifests directory, a short
// metrics window so that the test sees it turn.
func TestServerOperations(t *testing.T) {
	bin, err := framework.Binary()
	if err != nil {
		t.Fatal(err)
	}
	manifests := t.TempDir()
	writeManifest(t, manifests, "00-root.yaml", rootManifest("1"))
	writeManifest(t, manifests, "10-widgets.yaml", widgetsManifest)
	writeManifest(t, manifests, "20-broken.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: [not, a, map\n")
	writeManifest(t, manifests, "40-metrics-reader.yaml", metricsReaderManifest)
	writeManifest(t, manifests, ".hidden.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: hidden}\n")
	s := framework.StartServer(t, framework.Options{Args: []string{
		"--admin-token", ciAdminToken,
		"--log-format", "json",
		"--manifests-dir", manifests,
		"--metrics-top-planes", "2",
		"--metrics-window", "1s",
	}})

	t.Run("manifests", func(t *testing.T) { testManifests(t, s, manifests) })
	t.Run("metrics", func(t *testing.T) { testMetrics(t, s) })
	t.Run("healthcheck", func(t *testing.T) { testHealthcheck(t, s, bin) })
	t.Run("admin-token", func(t *testing.T) { testAdminToken(t, s, bin) })
	t.Run("json-logs", func(t *testing.T) { testJSONLogs(t, s, manifests) })
}

// ciAdminToken is what a CI pipeline would keep as a secret variable.
const ciAdminToken = "ci-0123456789abcdef0123456789abcdef"

func writeManifest(t *testing.T, dir, name, content string) {
	t.Helper()
	// Write and rename, as an editor or config management does: the
	// server never reads half a file.
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func rootManifest(value string) string {
	return `# the root plane's settings
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: kube-system
data:
  value: "` + value + `"
`
}

// A CRD and an object of it for plane mf-widgets (the plane key on the
// CRD, the annotation on the object), in one file.
const widgetsManifest = `plane: mf-widgets
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: first
  annotations:
    kplane.dev/plane: mf-widgets
spec:
  size: 3
`

// The README's least-privilege scraper: a service account of the root
// plane allowed GET /metrics and nothing else.
const metricsReaderManifest = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: prometheus
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: metrics-reader
rules:
- nonResourceURLs: ["/metrics"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: prometheus-metrics-reader
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: metrics-reader
subjects:
- kind: ServiceAccount
  name: prometheus
  namespace: kube-system
`

var widgetGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func testManifests(t *testing.T, s *framework.Server, dir string) {
	ctx := t.Context()
	root := s.Client(t, "root")

	// Readiness waited for the first pass: no polling needed.
	cm, err := root.CoreV1().ConfigMaps("kube-system").Get(ctx, "settings", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("root manifest not applied at start: %v", err)
	}
	if cm.Data["value"] != "1" {
		t.Fatalf("settings = %v", cm.Data)
	}
	if len(cm.ManagedFields) == 0 || cm.ManagedFields[0].Manager != "kplane-manifests" || cm.ManagedFields[0].Operation != metav1.ManagedFieldsOperationApply {
		t.Fatalf("want a server-side apply by kplane-manifests, got %+v", cm.ManagedFields)
	}
	widget, err := s.Dynamic(t, "mf-widgets").Resource(widgetGVR).Namespace("default").Get(ctx, "first", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("widget not applied in plane mf-widgets: %v", err)
	}
	if size, _, _ := unstructuredInt(widget.Object, "spec", "size"); size != 3 {
		t.Fatalf("widget = %v", widget.Object)
	}
	if _, ok := widget.GetAnnotations()["kplane.dev/plane"]; !ok || widget.GetAnnotations()["kplane.dev/plane"] != "mf-widgets" {
		t.Fatalf("widget annotations %v", widget.GetAnnotations())
	}
	// The CRD went to mf-widgets only.
	if _, err := s.Dynamic(t, "root").Resource(widgetGVR).Namespace("default").List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("widgets must not be served by the root plane: %v", err)
	}
	if _, err := root.CoreV1().ConfigMaps("default").Get(ctx, "hidden", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("dotfiles must be skipped: %v", err)
	}

	// A change is applied again; a new file is applied; a fixed file is
	// applied.
	writeManifest(t, dir, "00-root.yaml", rootManifest("2"))
	writeManifest(t, dir, "30-new.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: added-later\n")
	writeManifest(t, dir, "20-broken.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fixed}\ndata: {ok: \"yes\"}\n")
	framework.Eventually(t, framework.DefaultTimeout, "manifest changes applied", func(ctx context.Context) error {
		cm, err := root.CoreV1().ConfigMaps("kube-system").Get(ctx, "settings", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data["value"] != "2" {
			return fmt.Errorf("settings %v", cm.Data)
		}
		if _, err := root.CoreV1().Namespaces().Get(ctx, "added-later", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err = root.CoreV1().ConfigMaps("default").Get(ctx, "fixed", metav1.GetOptions{})
		return err
	})

	// Deleting a file leaves its objects.
	if err := os.Remove(filepath.Join(dir, "30-new.yaml")); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "the removal noticed", func(context.Context) error {
		if !strings.Contains(s.Log(), "manifest removed") {
			return fmt.Errorf("no \"manifest removed\" in the log")
		}
		return nil
	})
	if _, err := root.CoreV1().Namespaces().Get(ctx, "added-later", metav1.GetOptions{}); err != nil {
		t.Fatalf("objects of a removed manifest must stay: %v", err)
	}
}

func unstructuredInt(obj map[string]any, fields ...string) (int64, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false, nil
		}
		cur = m[f]
	}
	n, ok := cur.(int64)
	return n, ok, nil
}

// scrape reads the root plane's /metrics as the admin.
func scrape(t *testing.T, s *framework.Server) map[string]*dto.MetricFamily {
	t.Helper()
	body, err := s.Client(t, "root").CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return families
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func testMetrics(t *testing.T, s *framework.Server) {
	ctx := t.Context()
	busy := map[string]int{}
	for i, n := range []int{25, 15, 3, 2} {
		busy[uniquePlane(t, "metrics-"+strconv.Itoa(i))] = n
	}
	var top []string
	for plane, n := range busy {
		if n >= 15 {
			top = append(top, plane)
		}
	}

	var last map[string]*dto.MetricFamily
	framework.Eventually(t, framework.DefaultTimeout, "the two busiest planes in the top 2", func(ctx context.Context) error {
		for plane, n := range busy {
			c := s.Client(t, plane)
			for range n {
				if _, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
					return framework.Stop(err)
				}
			}
		}
		last = scrape(t, s)
		requests := last["kplane_plane_requests"]
		if requests == nil {
			return fmt.Errorf("no kplane_plane_requests yet")
		}
		// Bounded whatever the number of planes: the top 2 and "_others".
		if len(requests.GetMetric()) > 3 {
			t.Fatalf("kplane_plane_requests has %d series with --metrics-top-planes 2", len(requests.GetMetric()))
		}
		seen := map[string]float64{}
		for _, m := range requests.GetMetric() {
			seen[labelValue(m, "plane")] = m.GetGauge().GetValue()
		}
		if seen[top[0]] == 0 || seen[top[1]] == 0 || seen["_others"] == 0 {
			return fmt.Errorf("kplane_plane_requests %v", requests)
		}
		return nil
	})

	ready := -1.0
	for _, m := range last["kplane_planes"].GetMetric() {
		if labelValue(m, "phase") == "Ready" {
			ready = m.GetGauge().GetValue()
		}
	}
	if ready < float64(len(busy)) {
		t.Errorf("kplane_planes{phase=Ready} = %v, want at least %d", ready, len(busy))
	}
	if total := last["kplane_requests_total"].GetMetric(); len(total) != 1 || total[0].GetCounter().GetValue() < 45 {
		t.Errorf("kplane_requests_total = %v", total)
	}
	// Datastore latency: the storage layer's view of every datastore, and
	// kine's own SQL timings on SQLite.
	for _, name := range []string{"etcd_request_duration_seconds", "kine_sql_time_seconds"} {
		f := last[name]
		if f == nil || f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) == 0 {
			t.Errorf("%s missing or not a histogram: %v", name, f)
		}
	}

	// The scraper's service account reads /metrics and nothing else.
	expiry := int64(3600)
	tr, err := s.Client(t, "root").CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "prometheus",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of the prometheus service account: %v", err)
	}
	for path, want := range map[string]int{"/metrics": http.StatusOK, "/api/v1/namespaces": http.StatusForbidden} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		resp, err := s.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("metrics reader GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}

	// A plane's credential does not see the server's metrics, neither
	// through its plane nor on the root plane.
	plane := uniquePlane(t, "metrics-tenant")
	token := planeToken(t, s, plane)
	for _, url := range []string{s.PlaneURL(plane) + "/metrics", s.URL + "/metrics"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := s.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("a credential of plane %s read %s", plane, url)
		}
	}
}

func testHealthcheck(t *testing.T, s *framework.Server, bin string) {
	out, err := exec.Command(bin, "healthcheck", "--data-dir", s.DataDir, "--https-port", strconv.Itoa(s.Port)).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("healthcheck of a ready server: %v %q", err, out)
	}
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "healthcheck", "--data-dir", s.DataDir, "--https-port", strconv.Itoa(port), "--timeout", "2s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not ready") {
		t.Fatalf("healthcheck of no server must fail clearly: %v %q", err, out)
	}
	// The image's check (--wait) passes at once on a ready server, and
	// fails as clearly once its wait is over when there is none.
	out, err = exec.Command(bin, "healthcheck", "--wait", "4s", "--data-dir", s.DataDir, "--https-port", strconv.Itoa(s.Port)).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("healthcheck --wait of a ready server: %v %q", err, out)
	}
	out, err = exec.Command(bin, "healthcheck", "--wait", "1s", "--data-dir", s.DataDir, "--https-port", strconv.Itoa(port)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not ready") {
		t.Fatalf("healthcheck --wait of no server must fail clearly: %v %q", err, out)
	}
}

func testJSONLogs(t *testing.T, s *framework.Server, manifests string) {
	var banner map[string]any
	sawBrokenManifest := false
	sc := bufio.NewScanner(strings.NewReader(s.Log()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var entry map[string]any
		if err := json.Unmarshal(sc.Bytes(), &entry); err != nil {
			t.Fatalf("a log line is not JSON: %q", sc.Text())
		}
		if entry["msg"] == "kplane is starting" {
			banner = entry
		}
		if entry["msg"] == "manifest not applied" && entry["file"] == "20-broken.yaml" {
			sawBrokenManifest = true
		}
	}
	if banner == nil {
		t.Fatal("no start banner in the log")
	}
	for key, want := range map[string]string{
		"url":        s.URL,
		"kubeconfig": s.KubeconfigPath(),
		"manifests":  manifests,
	} {
		if banner[key] != want {
			t.Errorf("banner %s = %v, want %s", key, banner[key], want)
		}
	}
	if ds, _ := banner["datastore"].(string); !strings.Contains(ds, "sqlite") {
		t.Errorf("banner datastore = %v", banner["datastore"])
	}
	if !sawBrokenManifest {
		t.Error("the broken manifest was not reported with its file name")
	}
}

// A client that has the server's URL and admin token but not its data dir
// (a CI job next to a kplane service container) gets a plane kubeconfig.
func testAdminToken(t *testing.T, s *framework.Server, bin string) {
	ctx := t.Context()
	elsewhere := t.TempDir()
	kubeconfig := func(token, plane string) (string, error) {
		cmd := exec.CommandContext(ctx, bin, "kubeconfig", "--server", s.URL, plane)
		cmd.Env = append(os.Environ(), "KPLANE_DATA_DIR="+elsewhere, "HOME="+elsewhere, "KPLANE_TOKEN="+token)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return stderr.String(), err
		}
		return string(out), nil
	}
	plane := uniquePlane(t, "ci-job")
	out, err := kubeconfig(ciAdminToken, plane)
	if err != nil {
		t.Fatalf("kplane kubeconfig --server --token: %v\n%s", err, out)
	}
	path := filepath.Join(t.TempDir(), "plane.kubeconfig")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, "kubectl", "--kubeconfig", path, "create", "configmap", "from-ci", "--from-literal=k=v").CombinedOutput(); err != nil {
		t.Fatalf("kubectl with the plane kubeconfig: %v\n%s", err, out)
	}
	if _, err := s.Client(t, plane).CoreV1().ConfigMaps("default").Get(ctx, "from-ci", metav1.GetOptions{}); err != nil {
		t.Fatalf("the configmap is not in plane %s: %v", plane, err)
	}
	if strings.Contains(out, ciAdminToken) {
		t.Fatal("the plane kubeconfig carries the admin token")
	}

	// Another token, as long as the right one, cannot vouch for the CA.
	out, err = kubeconfig("ci-ffffffffffffffffffffffffffffffff", plane)
	if err == nil || !strings.Contains(out, "not signed with this token") {
		t.Fatalf("a wrong token must be refused before it is sent: %v\n%s", err, out)
	}

	// The token file already holds another admin token: a server started
	// with a different --admin-token refuses to start instead of ignoring it.
	// It gets a copy of the token file in a data dir of its own, as the
	// running server holds the lock of s.DataDir.
	port, err := framework.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := os.ReadFile(filepath.Join(s.DataDir, "tokens.csv"))
	if err != nil {
		t.Fatal(err)
	}
	copied := t.TempDir()
	if err := os.WriteFile(filepath.Join(copied, "tokens.csv"), tokens, 0o600); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(runCtx, bin, "server", "--data-dir", copied, "--https-port", strconv.Itoa(port),
		"--admin-token", "ci-ffffffffffffffffffffffffffffffff")
	startOut, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(startOut), "--admin-token") {
		t.Fatalf("a second admin token must stop start-up with a clear error: %v\n%s", err, startOut)
	}
	cmd = exec.CommandContext(runCtx, bin, "server", "--data-dir", t.TempDir(), "--https-port", strconv.Itoa(port), "--admin-token", "short")
	if startOut, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(startOut), "at least 32") {
		t.Fatalf("a short admin token must be refused: %v\n%s", err, startOut)
	}
}
