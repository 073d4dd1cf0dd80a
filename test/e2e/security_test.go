package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestAnonymous: without credentials only the root plane's health and
// version answer; nothing else does, and nothing is created.
func TestAnonymous(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "anon")
	base := "/clusters/" + plane + "/control-plane"
	for _, path := range []string{"/readyz", "/livez", "/healthz", "/version"} {
		if code, _, body := do(t, httpCase{path: path, anonymous: true}); code != http.StatusOK {
			t.Errorf("anonymous %s: %d %s", path, code, truncate(body, 200))
		}
	}
	for _, c := range []httpCase{
		{path: "/api/v1/namespaces"},
		{path: "/metrics"},
		{path: base + "/api/v1/namespaces"},
		{path: base + "/readyz"},
		{path: base + "/version"},
		{method: "POST", path: base + "/api/v1/namespaces", contentType: "application/json",
			body: []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}`)},
	} {
		c.anonymous = true
		if code, status, body := do(t, c); code != http.StatusUnauthorized || status == nil {
			t.Errorf("anonymous %s %s: got %d, want a 401 Status: %s", c.method, c.path, code, truncate(body, 200))
		}
	}
	// A bad token is refused too, even on a public path.
	req, _ := http.NewRequest("GET", shared.URL+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer not-a-token")
	resp, err := shared.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("bad token on /readyz: %d", resp.StatusCode)
	}
	if keys := shared.DatastoreKeys(t, "/registry/"); containsPlane(keys, plane) {
		t.Fatalf("anonymous requests wrote plane %s: %v", plane, keys)
	}
}

func containsPlane(keys []string, plane string) bool {
	for _, k := range keys {
		if strings.Contains(k, "/"+plane+"/") {
			return true
		}
	}
	return false
}
