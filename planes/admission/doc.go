// Package admission holds the admission plugins that must know the plane of a
// request. Upstream plugins that read cluster state through informers see
// only one cluster; these read the plane's own state from the shared caches.
package admission
