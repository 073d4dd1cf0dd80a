// Package snapshot serves GET /snapshot in every plane: the whole state of
// a plane, every resource it serves with every object in it, in one
// response read from memory, and a delta stream (watch=true) that keeps a
// copy of that state current.
//
// The "snapshot cache" is the shared watch cache of each resource
// (planes/storage): a snapshot lists the plane's key prefix of every cache
// at resourceVersion 0, converts each object to the version a client of
// the plane sees first in discovery, and writes it without managed fields
// and without the server-internal plane annotation. No call reads the
// datastore; the encoding of each object is kept while the object is
// unchanged and read, so repeated snapshots of a plane encode only what
// changed.
//
// The delta stream reads from taps: one cross-plane watch per resource on
// the same caches, started when a stream first needs that resource and
// shared by every stream of every plane, which hands each event to the
// streams of its plane and keeps the resource's latest events for streams
// that start a little behind it. A stream holds no watch of its own, only
// a queue; a plane without streams costs nothing. Streams are bounded per
// user of a plane and server-wide (429 beyond) and end after a server
// maximum at the latest.
//
// The package owns the request (query parameters, resource names), the
// authorization of every resource it reads (list for a snapshot, watch for
// a stream, in the plane of the request), the wire format (Snapshot,
// Event) and the resourceVersion a stream resumes from. It runs inside the
// normal handler chain: authentication, audit, impersonation, panic
// recovery and plane lifecycle apply as to any request, and a delta stream
// counts as a watch for every filter that treats watches specially.
package snapshot
