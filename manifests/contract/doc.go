// Package contract checks JSON documents against the schemas of kplane's
// API contract (manifests/openapi/kplane.v1.yaml), with a JSON Schema
// 2020-12 validator, the dialect of OpenAPI 3.1 schemas. Tests use it to
// hold the server's answers to the document; the binary does not link it.
package contract
