package manifests_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"kplane.dev/kplane/manifests"
	"kplane.dev/kplane/manifests/contract"
	"kplane.dev/kplane/test/e2e/framework"
)

// sdkOperations are the operations the Python SDK (sdk/python) calls.
var sdkOperations = []struct{ path, method string }{
	{"/snapshot", "get"},
	{"/clusters/{cluster}/control-plane/snapshot", "get"},
	{"/readyz", "get"},
	{"/clusters/{cluster}/control-plane/readyz", "get"},
	{"/apis/kplane.dev/v1/planes", "get"},
	{"/apis/kplane.dev/v1/planes", "post"},
	{"/apis/kplane.dev/v1/planes/{name}", "get"},
	{"/apis/kplane.dev/v1/planes/{name}", "delete"},
	{"/apis/kplane.dev/v1/fleets", "get"},
	{"/apis/kplane.dev/v1/fleets", "post"},
	{"/apis/kplane.dev/v1/fleets/{name}", "get"},
	{"/apis/kplane.dev/v1/fleets/{name}", "patch"},
	{"/apis/kplane.dev/v1/fleets/{name}", "delete"},
	{"/audit", "get"},
	{"/clusters/{cluster}/control-plane/audit", "get"},
	{"/openapi/kplane.yaml", "get"},
	{"/openapi/kplane.json", "get"},
}

// sdkFields are the fields the SDK reads or writes, per schema; "!" marks
// the ones the document must declare required.
var sdkFields = map[string][]string{
	"Snapshot":         {"!cluster", "!snapshotTime", "!resourceVersion", "!liveResources", "!resources"},
	"SnapshotResource": {"!group", "!version", "!resource", "!kind", "!namespaced", "!synced", "!itemCount", "resourceVersion", "!items"},
	"SnapshotEvent":    {"!type", "object", "group", "resource", "resourceVersion"},
	"Plane":            {"!apiVersion", "!kind", "metadata", "spec", "status"},
	"PlaneSpec":        {"template", "from", "simulation", "audit", "limits"},
	"PlaneAudit":       {"level"},
	"AuditEvent":       {"!apiVersion", "!kind", "!level", "!auditID", "!stage", "!requestURI", "!verb", "!user", "objectRef", "responseStatus", "requestObject", "responseObject", "!requestReceivedTimestamp", "!stageTimestamp", "!annotations"},
	"PlaneStatus":      {"phase", "objectCount", "bootstrappedAt", "message", "usage"},
	"PlaneLimits":      {"maxObjects", "maxBytes", "requestsPerSecond", "requestBurst", "maxWatches"},
	"PlaneUsage":       {"objects", "bytes", "watches"},
	"PlaneList":        {"!items", "metadata"},
	"Fleet":            {"!apiVersion", "!kind", "metadata", "!spec", "status"},
	"FleetSpec":        {"replicas", "namePrefix", "names", "deletionPolicy", "ttlSecondsAfterReady", "template", "simulation", "limits", "audit"},
	"FleetStatus":      {"replicas", "readyReplicas", "observedGeneration", "members", "conditions", "omittedMembers"},
	"FleetMember":      {"!name", "!phase", "message", "lastTransitionTime"},
	"FleetList":        {"!items"},
	"Condition":        {"!type", "!status", "reason", "message", "lastTransitionTime"},
	"ObjectMeta":       {"name", "labels", "resourceVersion", "creationTimestamp", "deletionTimestamp"},
	"Status":           {"!kind", "!code", "!status", "reason", "message", "details"},
}

func TestOpenAPIHasWhatTheSDKUses(t *testing.T) {
	doc, err := contract.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range sdkOperations {
		if doc.Operation(op.path, op.method) == nil {
			t.Errorf("%s: no %s %s", manifests.OpenAPIPath, op.method, op.path)
		}
	}
	for schema, fields := range sdkFields {
		props, err := doc.Properties(schema)
		if err != nil {
			t.Errorf("%s: %v", manifests.OpenAPIPath, err)
			continue
		}
		for _, f := range fields {
			name, required := f, false
			if f[0] == '!' {
				name, required = f[1:], true
			}
			isRequired, ok := props[name]
			switch {
			case !ok:
				t.Errorf("%s: schema %s has no property %s", manifests.OpenAPIPath, schema, name)
			case required && !isRequired:
				t.Errorf("%s: schema %s must require %s", manifests.OpenAPIPath, schema, name)
			}
		}
	}
}

// Every component schema compiles as JSON Schema 2020-12, and examples of
// what the server answers validate (or not) as they should.
func TestOpenAPISchemasCompile(t *testing.T) {
	doc, err := contract.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range doc.SchemaNames() {
		if _, err := doc.Schema(name); err != nil {
			t.Error(err)
		}
	}
	cases := []struct {
		schema, body string
		valid        bool
	}{
		{"Snapshot", `{"cluster":"a","snapshotTime":"2026-11-22T06:00:00Z","resourceVersion":"12","liveResources":1,"resources":[{"group":"","version":"v1","resource":"configmaps","kind":"ConfigMap","namespaced":true,"synced":true,"itemCount":1,"resourceVersion":"12","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"default"}}]}]}`, true},
		{"Snapshot", `{"cluster":"a","snapshotTime":"yesterday","resourceVersion":"12","liveResources":0,"resources":[]}`, false},
		{"Snapshot", `{"cluster":"a","snapshotTime":"2026-11-22T06:00:00Z","resourceVersion":"12","liveResources":0,"resources":[{"group":"","resource":"pods"}]}`, false},
		{"SnapshotEvent", `{"type":"BOOKMARK","resourceVersion":"40"}`, true},
		{"SnapshotEvent", `{"type":"BOOKMARK","resourceVersion":"40","object":{"metadata":{"resourceVersion":"40"}}}`, true},
		{"SnapshotEvent", `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"40"}}}`, false},
		{"SnapshotEvent", `{"type":"ADDED","group":"","resource":"configmaps","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}}`, true},
		{"SnapshotEvent", `{"type":"ADDED","resource":"configmaps"}`, false},
		{"SnapshotEvent", `{"type":"MODIFIED","object":{"metadata":{"name":"c"}}}`, false},
		{"SnapshotEvent", `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired"}}`, true},
		{"SnapshotEvent", `{"type":"CHANGED","object":{"apiVersion":"v1","kind":"Pod"}}`, false},
		{"Fleet", `{"apiVersion":"kplane.dev/v1","kind":"Fleet","metadata":{"name":"f"},"spec":{"replicas":2},"status":{"replicas":2,"readyReplicas":1,"members":[{"name":"f-0000","phase":"Ready"},{"name":"f-0001","phase":"Pending"}]}}`, true},
		{"Fleet", `{"apiVersion":"kplane.dev/v1","kind":"Fleet","metadata":{"name":"f"},"spec":{"replicas":2},"status":{"members":[{"name":"f-0000","phase":"Gone"}]}}`, false},
		{"Plane", `{"apiVersion":"kplane.dev/v1","kind":"Plane","metadata":{"name":"p"},"status":{"phase":"Ready","objectCount":20}}`, true},
		{"AuditEvent", `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a","stage":"ResponseComplete","requestURI":"/api/v1/namespaces","verb":"list","user":{"username":"u","groups":["g"]},"objectRef":{"resource":"namespaces","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-11-24T13:49:27.753258Z","stageTimestamp":"2026-11-24T13:49:27.839259Z","annotations":{"audit.kplane.dev/cursor":"1","kplane.dev/plane":"a"}}`, true},
		{"AuditEvent", `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a","stage":"ResponseComplete","requestURI":"/","verb":"get","user":{},"requestReceivedTimestamp":"2026-11-24T13:49:27Z","stageTimestamp":"2026-11-24T13:49:27Z","annotations":{"kplane.dev/plane":"a"}}`, false},
		{"AuditEvent", `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"None","auditID":"a","stage":"ResponseComplete","requestURI":"/","verb":"get","user":{},"requestReceivedTimestamp":"2026-11-24T13:49:27Z","stageTimestamp":"2026-11-24T13:49:27Z","annotations":{"audit.kplane.dev/cursor":"1","kplane.dev/plane":"a"}}`, false},
		{"Status", `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, true},
		{"Status", `{"kind":"Status","apiVersion":"v1","status":"Failure","code":"404"}`, false},
	}
	for i, c := range cases {
		err := doc.Validate(c.schema, []byte(c.body))
		if (err == nil) != c.valid {
			t.Errorf("case %d (%s): valid=%v, got %v", i, c.schema, c.valid, err)
		}
	}
}

// The document is valid OpenAPI 3.1 by the reference validator.
func TestOpenAPIIsValid31(t *testing.T) {
	validator := openAPISpecValidator(t)
	cmd := exec.Command(validator[0], append(validator[1:], "--schema", "3.1.0", filepath.Join("openapi", "kplane.v1.yaml"))...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s is not valid OpenAPI 3.1: %v\n%s", manifests.OpenAPIPath, err, out)
	}
}

// openAPISpecValidator is the command line of the openapi-spec-validator
// CLI, or of its module run by python3 when pip put the package where $PATH
// does not reach. It fails the test when neither is installed.
func openAPISpecValidator(t *testing.T) []string {
	t.Helper()
	if path, err := exec.LookPath("openapi-spec-validator"); err == nil {
		return []string{path}
	}
	python, err := exec.LookPath("python3")
	framework.Require(t, err == nil && exec.Command(python, "-c", "import openapi_spec_validator").Run() == nil,
		"openapi-spec-validator is not installed (pip install openapi-spec-validator; .ci/run checks for it)")
	return []string{python, "-m", "openapi_spec_validator"}
}

// sdkSpecDir is where the Python SDK ships the contract.
const sdkSpecDir = "../sdk/python/src/kplane/_spec"

// The Python SDK ships the same document: the YAML byte for byte and a
// JSON rendering of it (the SDK reads JSON with the standard library).
// KPLANE_UPDATE_SDK_SPEC=1 (make sdk-spec) writes both.
func TestSDKShipsTheContract(t *testing.T) {
	asJSON, err := manifests.OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, asJSON, "", "  "); err != nil {
		t.Fatal(err)
	}
	indented.WriteByte('\n')
	yamlPath, jsonPath := filepath.Join(sdkSpecDir, "kplane.v1.yaml"), filepath.Join(sdkSpecDir, "kplane.v1.json")
	if os.Getenv("KPLANE_UPDATE_SDK_SPEC") != "" {
		if err := os.WriteFile(yamlPath, manifests.OpenAPIYAML(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(jsonPath, indented.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shipped, err := os.ReadFile(yamlPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shipped, manifests.OpenAPIYAML()) {
		t.Errorf("%s differs from %s: run 'make sdk-spec'", yamlPath, manifests.OpenAPIPath)
	}
	shippedJSON, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal(asJSON, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(shippedJSON, &got); err != nil {
		t.Fatalf("%s: %v", jsonPath, err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s differs from %s: run 'make sdk-spec'", jsonPath, manifests.OpenAPIPath)
	}
}
