// Package services serves the core Service resource with ClusterIP and
// NodePort allocation scoped to a plane: two planes may hold the same IP, one
// plane never holds a duplicate, whichever servers on one datastore made its
// Services.
//
// The upstream service registry allocates through allocator interfaces that
// carry no context, so it cannot learn the plane of a call. Instead of forking
// it, this package keeps one upstream registry per plane that has written a
// Service and routes every write to the registry of the caller's plane. Reads
// go to a shared registry. All registries share one storage (and one watch
// cache), so a plane's registry costs a few structs, created on its first
// Service write.
//
// A plane's allocations are two RangeAllocation records in the datastore
// (upstream's form: a range and a bitmap), cluster IPs and node ports,
// stored through the plane-scoped storage like any of the plane's objects.
// Every allocation and release is a compare-and-swap of the record, so two
// servers never hand out one address; nothing is kept in memory between
// calls. A plane without a record (yet) starts from the addresses its stored
// Services hold.
package services
