// Package informers gives upstream controllers the client-go informers they
// take (DeploymentInformer, PodInformer, ...), one per resource for every
// plane, fed by the shared watch caches of planes/storage instead of a
// watch of their own: each cached (internal) object is converted to its
// versioned form, sharing the cache's slices and maps (a live event's
// object is already the watch cache's copy), without managed fields, with
// the plane folded into its namespace (planens). A plane with none of the
// objects costs the informers nothing.
package informers
