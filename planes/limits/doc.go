// Package limits holds each plane to what it may use: records and bytes
// stored, requests per second and open watches (Plane.spec.limits over the
// server's defaults). Objects and bytes are checked by the plane-scoped
// storage on every write that grows them, against the usage the storage's
// counters follow from the shared watch caches; the request rate and the
// watches are checked by a filter of the handler chain. Nothing runs per
// plane: a rate limiter is a struct made on a limited plane's first
// request, and an idle plane costs a map lookup at most.
package limits
