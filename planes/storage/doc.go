// Package storage makes every upstream registry plane-scoped without forking
// it. It wraps the server's RESTOptionsGetter so that the storage each
// registry receives
//
//   - rewrites every key with the plane from the request context, right after
//     the resource prefix (/registry/<resource>/<plane>/<namespace>/<name>),
//     and refuses any call whose context carries no plane;
//   - stamps the plane annotation on every object it writes, which is how the
//     shared watch cache maps a cached object back to its key;
//   - shares one watch cache per resource across all planes, with the plane as
//     the cacher's trigger index, so an event is handed only to watchers of
//     its own plane and per-plane lists are prefix scans of memory.
//
// The datastore sees one recursive watch per resource, whatever the number of
// planes. On a server alone on its datastore, consistent reads of built-in
// resources are served by the watch caches too (freshreads.go).
package storage
