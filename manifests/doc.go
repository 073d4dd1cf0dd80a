// Package manifests embeds the API kplane installs into the root plane at
// start (the Plane and Fleet CRDs) and the OpenAPI document of kplane's own
// surface. The YAML files are the source of truth; the binary serves what
// they say.
package manifests
