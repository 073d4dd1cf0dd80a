package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kplane.dev/kplane/manifests"
	"kplane.dev/kplane/manifests/contract"
	"kplane.dev/kplane/test/e2e/framework"
)

// contractDo sends an admin request to the shared server and returns the
// status code and body.
func contractDo(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+shared.AdminToken())
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := shared.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// servedContract fetches /openapi/kplane.json without credentials and
// compiles it.
func servedContract(t *testing.T) *contract.Document {
	t.Helper()
	resp, err := shared.HTTPClient().Get(shared.URL + "/openapi/kplane.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi/kplane.json: %d %s", resp.StatusCode, data)
	}
	doc, err := contract.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func mustValidate(t *testing.T, doc *contract.Document, schema, what string, body []byte) {
	t.Helper()
	if err := doc.Validate(schema, body); err != nil {
		t.Errorf("%s: %v\n%.2000s", what, err, body)
	}
}

func TestContractServedWithoutCredentials(t *testing.T) {
	client := shared.HTTPClient()
	for path, want := range map[string]string{"/openapi/kplane.yaml": "application/yaml", "/openapi/kplane.json": "application/json"} {
		resp, err := client.Get(shared.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != want {
			t.Fatalf("GET %s: %d %s %.200s", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if path == "/openapi/kplane.yaml" && !bytes.Equal(body, manifests.OpenAPIYAML()) {
			t.Errorf("GET %s is not %s", path, manifests.OpenAPIPath)
		}
	}
	// A credential that fails is refused, as on every public path.
	req, _ := http.NewRequest(http.MethodGet, shared.URL+"/openapi/kplane.json", nil)
	req.Header.Set("Authorization", "Bearer wrong")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("bad token: %d, want 401", resp.StatusCode)
	}
	// The contract describes the server, not a plane.
	code, body := contractDo(t, http.MethodGet, shared.PlaneURL(uniquePlane(t, "contract"))+"/openapi/kplane.json", nil)
	if code != http.StatusNotFound {
		t.Errorf("plane-scoped contract: %d %.200s, want 404", code, body)
	}
	code, _ = contractDo(t, http.MethodPost, shared.URL+"/openapi/kplane.json", map[string]string{})
	if code != http.StatusMethodNotAllowed {
		t.Errorf("POST /openapi/kplane.json: %d, want 405", code)
	}
}

func TestContractPlaneResponses(t *testing.T) {
	doc := servedContract(t)
	plane := uniquePlane(t, "contract-plane")
	planes := shared.URL + "/apis/kplane.dev/v1/planes"

	code, body := contractDo(t, http.MethodPost, planes, map[string]any{
		"apiVersion": "kplane.dev/v1", "kind": "Plane", "metadata": map[string]any{"name": plane},
	})
	if code != http.StatusCreated {
		t.Fatalf("create Plane: %d %s", code, body)
	}
	mustValidate(t, doc, "Plane", "created Plane", body)
	framework.Eventually(t, framework.DefaultTimeout, "Plane "+plane+" Ready", func(context.Context) error {
		code, body = contractDo(t, http.MethodGet, planes+"/"+plane, nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"phase":"Ready"`) {
			return fmt.Errorf("%d %.300s", code, body)
		}
		return nil
	})
	mustValidate(t, doc, "Plane", "ready Plane", body)
	code, body = contractDo(t, http.MethodGet, planes, nil)
	if code != http.StatusOK {
		t.Fatalf("list Planes: %d %s", code, body)
	}
	mustValidate(t, doc, "PlaneList", "PlaneList", body)

	code, body = contractDo(t, http.MethodGet, shared.PlaneURL(plane)+"/readyz", nil)
	if code != http.StatusOK || string(body) != "ok" {
		t.Errorf("readyz: %d %s", code, body)
	}
	for what, req := range map[string][2]string{
		"unknown Plane":          {http.MethodGet, planes + "/" + uniquePlane(t, "absent")},
		"unknown plane's readyz": {http.MethodGet, shared.PlaneURL(uniquePlane(t, "absent")) + "/readyz"},
		"invalid Plane":          {http.MethodPost, planes},
	} {
		var body any
		if req[0] == http.MethodPost {
			body = map[string]any{"apiVersion": "kplane.dev/v1", "kind": "Plane", "metadata": map[string]any{"name": "Not_A_Plane"}}
		}
		code, data := contractDo(t, req[0], req[1], body)
		if code < 400 {
			t.Errorf("%s: %d, want an error", what, code)
		}
		mustValidate(t, doc, "Status", what, data)
	}

	code, body = contractDo(t, http.MethodDelete, planes+"/"+plane, nil)
	if code != http.StatusOK && code != http.StatusAccepted {
		t.Fatalf("delete Plane: %d %s", code, body)
	}
	if doc.Validate("Plane", body) != nil {
		mustValidate(t, doc, "Status", "delete Plane answer", body)
	}
}

func TestContractSnapshotResponses(t *testing.T) {
	doc := servedContract(t)
	plane := uniquePlane(t, "contract-snap")
	base := shared.PlaneURL(plane)
	code, body := contractDo(t, http.MethodPost, base+"/api/v1/namespaces/default/configmaps", map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}, "data": map[string]string{"k": "v"},
	})
	if code != http.StatusCreated {
		t.Fatalf("create configmap: %d %s", code, body)
	}
	for _, query := range []string{"", "?includeEmpty=true", "?resource=apps/deployments", "?resource=configmaps,apps/deployments&includeEmpty=true", "?warm=true&namespace=default"} {
		code, body := contractDo(t, http.MethodGet, base+"/snapshot"+query, nil)
		if code != http.StatusOK {
			t.Fatalf("snapshot%s: %d %s", query, code, body)
		}
		mustValidate(t, doc, "Snapshot", "snapshot"+query, body)
	}
	code, body = contractDo(t, http.MethodGet, shared.URL+"/snapshot?resource=namespaces", nil)
	mustValidate(t, doc, "Snapshot", "root snapshot", body)

	var snap struct {
		ResourceVersion string `json:"resourceVersion"`
	}
	code, body = contractDo(t, http.MethodGet, base+"/snapshot?resource=configmaps", nil)
	if err := json.Unmarshal(body, &snap); err != nil || code != http.StatusOK {
		t.Fatalf("snapshot: %d %v %s", code, err, body)
	}
	// The stream from scratch starts with the current state; every line is
	// a SnapshotEvent.
	code, body = contractDo(t, http.MethodGet, base+"/snapshot?watch=true&resource=configmaps&timeoutSeconds=1", nil)
	if code != http.StatusOK {
		t.Fatalf("delta stream: %d %s", code, body)
	}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("the delta stream sent nothing")
	}
	for i, line := range lines {
		mustValidate(t, doc, "SnapshotEvent", fmt.Sprintf("stream line %d", i), []byte(line))
	}

	for what, query := range map[string]string{
		"unknown resource": "?resource=nosuchthings",
		"bad bool":         "?includeEmpty=maybe",
		"too old":          "?watch=true&resourceVersion=1&resource=configmaps",
	} {
		code, body := contractDo(t, http.MethodGet, base+"/snapshot"+query, nil)
		if code < 400 {
			t.Errorf("%s: %d, want an error", what, code)
		}
		mustValidate(t, doc, "Status", what, body)
	}
}

func TestContractFleetResponses(t *testing.T) {
	doc := servedContract(t)
	name := uniquePlane(t, "contract-fleet")
	fleets := shared.URL + "/apis/kplane.dev/v1/fleets"
	code, body := contractDo(t, http.MethodPost, fleets, map[string]any{
		"apiVersion": "kplane.dev/v1", "kind": "Fleet", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"replicas": 2, "deletionPolicy": "Delete"},
	})
	if code != http.StatusCreated {
		t.Fatalf("create Fleet: %d %s", code, body)
	}
	mustValidate(t, doc, "Fleet", "created Fleet", body)
	t.Cleanup(func() { contractDo(t, http.MethodDelete, fleets+"/"+name, nil) })
	framework.Eventually(t, 2*framework.DefaultTimeout, "Fleet "+name+" 2/2 ready", func(context.Context) error {
		code, body = contractDo(t, http.MethodGet, fleets+"/"+name, nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"readyReplicas":2`) {
			return fmt.Errorf("%d %.300s", code, body)
		}
		return nil
	})
	mustValidate(t, doc, "Fleet", "ready Fleet", body)
	code, body = contractDo(t, http.MethodGet, fleets+"?labelSelector="+url.QueryEscape("a!=b"), nil)
	mustValidate(t, doc, "FleetList", "FleetList", body)

	code, body = contractDo(t, http.MethodPost, fleets, map[string]any{
		"apiVersion": "kplane.dev/v1", "kind": "Fleet", "metadata": map[string]any{"name": uniquePlane(t, "bad-fleet")},
		"spec": map[string]any{"replicas": 2, "names": []string{"a"}},
	})
	if code != http.StatusUnprocessableEntity {
		t.Errorf("invalid Fleet: %d, want 422", code)
	}
	mustValidate(t, doc, "Status", "invalid Fleet", body)

	code, body = contractDo(t, http.MethodDelete, fleets+"/"+name, nil)
	if code != http.StatusOK && code != http.StatusAccepted {
		t.Fatalf("delete Fleet: %d %s", code, body)
	}
	if doc.Validate("Fleet", body) != nil {
		mustValidate(t, doc, "Status", "delete Fleet answer", body)
	}
}

// TestContractAuditResponses: every line of a plane's trail (Metadata and
// RequestResponse events, refusals) is an AuditEvent; its errors are
// Statuses.
func TestContractAuditResponses(t *testing.T) {
	doc := servedContract(t)
	plane := uniquePlane(t, "contract-audit")
	base := shared.PlaneURL(plane)
	create := func(name string) {
		code, body := contractDo(t, http.MethodPost, base+"/api/v1/namespaces/default/configmaps", map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}, "data": map[string]string{"k": "v"},
		})
		if code != http.StatusCreated {
			t.Fatalf("create configmap %s: %d %s", name, code, body)
		}
	}
	create("metadata-only")
	patch := []byte(`{"spec":{"audit":{"level":"RequestResponse"}}}`)
	if _, err := shared.Dynamic(t, "root").Resource(planeGVR).Patch(context.Background(), plane, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("set the audit level: %v", err)
	}
	code, body := contractDo(t, http.MethodGet, shared.URL+"/apis/kplane.dev/v1/planes/"+plane, nil)
	mustValidate(t, doc, "Plane", "Plane with an audit level", body)
	eventually(t, framework.DefaultTimeout, "a write recorded with its body", func() (bool, error) {
		name := fmt.Sprintf("with-body-%d", time.Now().UnixNano())
		create(name)
		code, body := contractDo(t, http.MethodGet, base+"/audit", nil)
		if code != http.StatusOK {
			return false, fmt.Errorf("GET audit: %d %s", code, body)
		}
		return strings.Contains(string(body), `"requestObject"`) && strings.Contains(string(body), name), nil
	})
	contractDo(t, http.MethodGet, base+"/api/v1/namespaces/default/configmaps/missing", nil)
	code, body = contractDo(t, http.MethodGet, base+"/audit", nil)
	if code != http.StatusOK {
		t.Fatalf("GET audit: %d %s", code, body)
	}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	for i, line := range lines {
		mustValidate(t, doc, "AuditEvent", fmt.Sprintf("audit line %d", i), []byte(line))
	}
	code, body = contractDo(t, http.MethodGet, shared.URL+"/audit?limit=3", nil)
	if code != http.StatusOK {
		t.Fatalf("GET root audit: %d %s", code, body)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		mustValidate(t, doc, "AuditEvent", fmt.Sprintf("root audit line %d", i), []byte(line))
	}
	for what, query := range map[string]string{"bad since": "?since=yesterday", "bad limit": "?limit=0", "gone cursor": "?since=99999999"} {
		code, body := contractDo(t, http.MethodGet, base+"/audit"+query, nil)
		if code < 400 {
			t.Errorf("%s: %d, want an error", what, code)
		}
		mustValidate(t, doc, "Status", what, body)
	}
}
