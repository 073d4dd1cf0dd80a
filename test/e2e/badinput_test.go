package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type httpCase struct {
	name        string
	method      string
	path        string
	contentType string
	body        []byte
	anonymous   bool
	wantCode    int
}

// do sends a raw request to the shared server and returns the code and the
// decoded Status (when the body is one).
func do(t *testing.T, c httpCase) (int, *metav1.Status, string) {
	t.Helper()
	method := c.method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, shared.URL+c.path, bytes.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	// Keep the path exactly as written: no client-side cleaning.
	req.URL.Opaque = c.path
	if idx := strings.Index(c.path, "?"); idx >= 0 {
		req.URL.Opaque = c.path[:idx]
		req.URL.RawQuery = c.path[idx+1:]
	}
	if !c.anonymous {
		req.Header.Set("Authorization", "Bearer "+shared.AdminToken())
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := shared.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var status metav1.Status
	if json.Unmarshal(body, &status) == nil && status.Kind == "Status" {
		return resp.StatusCode, &status, string(body)
	}
	return resp.StatusCode, nil, string(body)
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "bad")
	base := "/clusters/" + plane + "/control-plane"
	big := bytes.Repeat([]byte("x"), 4<<20)
	huge := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"huge"},"data":{"x":"` + string(big) + `"}}`)

	cases := []httpCase{
		{name: "uppercase and underscore id", path: "/clusters/Bad_ID/control-plane/api/v1/namespaces", wantCode: 400},
		{name: "64 characters", path: "/clusters/" + strings.Repeat("a", 64) + "/control-plane/api", wantCode: 400},
		{name: "dot dot id", path: "/clusters/../control-plane/api", wantCode: 400},
		{name: "empty id", path: "/clusters//control-plane/api", wantCode: 400},
		{name: "encoded slash in id", path: "/clusters/a%2Fb/control-plane/api", wantCode: 400},
		{name: "traversal to another plane", path: base + "/../../clusters/other/control-plane/api/v1/namespaces", wantCode: 400},
		{name: "encoded traversal", path: base + "/%2e%2e/%2e%2e/clusters/other/control-plane/api", wantCode: 400},
		{name: "double slash", path: base + "//api/v1/namespaces", wantCode: 400},
		{name: "wildcard id", path: "/clusters/*/control-plane/api", wantCode: 400},
		{name: "no control-plane segment", path: "/clusters/" + plane + "/api", wantCode: 404},
		{name: "server-wide path inside a plane", path: base + "/metrics", wantCode: 404},
		{name: "malformed JSON", method: "POST", path: base + "/api/v1/namespaces/default/configmaps",
			contentType: "application/json", body: []byte(`{"apiVersion":"v1","kind":"ConfigMap",`), wantCode: 400},
		{name: "malformed YAML", method: "POST", path: base + "/api/v1/namespaces/default/configmaps",
			contentType: "application/yaml", body: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n"), wantCode: 400},
		{name: "wrong kind in body", method: "POST", path: base + "/api/v1/namespaces/default/configmaps",
			contentType: "application/json", body: []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}`), wantCode: 400},
		{name: "invalid object name", method: "POST", path: base + "/api/v1/namespaces/default/configmaps",
			contentType: "application/json", body: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Not_Valid"}}`), wantCode: 422},
		{name: "oversized object", method: "POST", path: base + "/api/v1/namespaces/default/configmaps",
			contentType: "application/json", body: huge, wantCode: 413},
		{name: "unknown resource", path: base + "/api/v1/namespaces/default/frobnicators", wantCode: 404},
		{name: "anonymous API request", path: base + "/api/v1/namespaces", anonymous: true, wantCode: 401},
		{name: "anonymous root API request", path: "/api/v1/namespaces", anonymous: true, wantCode: 401},
	}
	for _, c := range cases {
		code, status, body := do(t, c)
		if code != c.wantCode {
			t.Errorf("%s: got %d, want %d: %s", c.name, code, c.wantCode, truncate(body, 300))
			continue
		}
		if status == nil || status.Code != int32(c.wantCode) || status.Message == "" {
			t.Errorf("%s: want a Kubernetes Status with code %d and a message, got: %s", c.name, c.wantCode, truncate(body, 300))
		}
	}

	// The server is still healthy and the plane still works.
	if code, _, body := do(t, httpCase{path: "/readyz", anonymous: true}); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("readyz after bad input: %d %s", code, body)
	}
	if code, _, body := do(t, httpCase{path: base + "/api/v1/namespaces/default/configmaps"}); code != 200 {
		t.Fatalf("plane after bad input: %d %s", code, truncate(body, 300))
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
