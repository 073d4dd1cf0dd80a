// Package controllers runs the generic controllers every plane needs
// (namespace deletion, garbage collection, default service accounts and the
// root CA ConfigMap, ClusterRole aggregation) once for all planes.
//
// A controller here is not an informer set per plane: every resource's
// shared watch cache is followed once, across all planes (planes/storage
// Follow), and the events are fanned out to the controllers that care about
// that resource. Work items carry their plane; workers read the current
// state from the shared caches through the plane-scoped storage and write
// through in-process clients that address the item's plane, so writes pass
// authentication, admission and the plane lifecycle like any client's. An
// idle plane costs a controller nothing: no goroutine, no queue entry and
// no memory until one of its objects changes.
package controllers
