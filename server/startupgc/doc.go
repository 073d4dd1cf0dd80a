// Package startupgc keeps the garbage collector from running while the
// server starts, and gives it its settings back once the server is ready.
//
// Start-up allocates its heap from nothing to about 50 MiB (package
// tables, schemes, every API group's handlers and storages): with the
// default GOGC the collector ran about eight cycles on the way, each
// marking a heap that start-up itself keeps, on the same two cores that
// build the server. The garbage start-up leaves is returned to the
// operating system once the server is ready (FreeOSMemory), so skipping
// the collections only moves when it is freed.
package startupgc
