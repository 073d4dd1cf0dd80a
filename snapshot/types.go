package snapshot

import (
	"encoding/json"
)

// Path is where every plane serves its snapshot (after the plane prefix).
const Path = "/snapshot"

// Snapshot is the response of GET /snapshot.
type Snapshot struct {
	// Cluster is the plane.
	Cluster string `json:"cluster"`
	// SnapshotTime is when the server read the caches (RFC 3339, UTC).
	SnapshotTime string `json:"snapshotTime"`
	// ResourceVersion is the datastore revision every listed resource is
	// at least as fresh as; a delta stream started from it misses nothing.
	// Empty when no resource was synced.
	ResourceVersion string `json:"resourceVersion"`
	// LiveResources is the number of resources of the snapshot (after
	// filters and authorization, empty ones included) whose cache is
	// synced.
	LiveResources int        `json:"liveResources"`
	Resources     []Resource `json:"resources"`
}

// Resource is one resource of a snapshot.
type Resource struct {
	Group      string `json:"group"`
	Version    string `json:"version"`
	Resource   string `json:"resource"`
	Kind       string `json:"kind"`
	Namespaced bool   `json:"namespaced"`
	// Synced is false while the resource's cache is not initialized (or,
	// for a custom resource, not built yet: ask with warm=true); its items
	// are then unknown, not absent.
	Synced    bool `json:"synced"`
	ItemCount int  `json:"itemCount"`
	// ResourceVersion is the revision this resource's cache was at.
	ResourceVersion string            `json:"resourceVersion"`
	Items           []json.RawMessage `json:"items"`
}

// Name is how the resource is named in resource= filters: "pods",
// "deployments.apps".
func (r Resource) Name() string {
	if r.Group == "" {
		return r.Resource
	}
	return r.Resource + "." + r.Group
}

// Event is one line of a delta stream.
type Event struct {
	// Type is ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.
	Type string `json:"type"`
	// Group and Resource say which resource of the snapshot the object
	// belongs to (not set on BOOKMARK and ERROR).
	Group    string `json:"group,omitempty"`
	Resource string `json:"resource,omitempty"`
	// ResourceVersion, on a BOOKMARK, is a revision every resource of the
	// stream has been delivered up to: a stream resumed from it misses
	// nothing.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Object is the object (same shape as snapshot items); on ERROR a
	// metav1.Status; on BOOKMARK {"metadata":{"resourceVersion":...}}.
	Object json.RawMessage `json:"object,omitempty"`
}

// Event types.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
	Bookmark = "BOOKMARK"
	Error    = "ERROR"
)
