package manifests

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"
)

// OpenAPIPath is where the contract lives in the repository (and, as a
// copy, in the Python SDK).
const OpenAPIPath = "manifests/openapi/kplane.v1.yaml"

//go:embed openapi/kplane.v1.yaml
var openAPIYAML []byte

// OpenAPIYAML returns the OpenAPI 3.1 document of kplane's own API (the
// snapshot, Planes, Fleets, per-plane readiness) exactly as written.
func OpenAPIYAML() []byte {
	return append([]byte(nil), openAPIYAML...)
}

// OpenAPIJSON returns the same document as JSON.
func OpenAPIJSON() ([]byte, error) {
	out, err := yaml.YAMLToJSON(openAPIYAML)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", OpenAPIPath, err)
	}
	return out, nil
}
