// Package routing is the outermost HTTP filter of the apiserver: it maps
// /clusters/<id>/control-plane/<rest> to /<rest>, puts the plane id into the
// request context and rejects malformed plane paths with a Kubernetes Status
// before anything else (authentication included) sees the request. Paths
// without the prefix belong to the root plane.
package routing
