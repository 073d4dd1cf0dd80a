// Package services serves the core Service resource with ClusterIP and
// NodePort allocation scoped to a plane: two planes may hold the same IP, one
// plane never holds a duplicate.
//
// The upstream service registry allocates through allocator interfaces that
// carry no context, so it cannot learn the plane of a call. Instead of forking
// it, this package keeps one upstream registry per plane that has written a
// Service, each with in-memory allocators seeded from that plane's existing
// Services, and routes every write to the registry of the caller's plane.
// Reads go to a shared registry. All registries share one storage (and one
// watch cache), so a plane's registry costs a few structs and two small
// bitmaps, created on its first Service write.
package services
