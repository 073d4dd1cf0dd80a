// Package informers gives upstream controllers the client-go informers they
// take (DeploymentInformer, PodInformer, ...), one per resource for every
// plane, fed by the shared watch caches of planes/storage instead of a
// watch of their own: each cached (internal) object is converted to its
// versioned form, sharing the cache's slices and maps, with the plane
// folded into its namespace (planens). A plane with none of the objects
// costs the informers nothing.
package informers
