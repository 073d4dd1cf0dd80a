// Package gc is the garbage collector of every plane: it deletes objects
// whose owners are gone (background cascading), holds owners deleted in
// the foreground until their blocking dependents are gone, and releases
// the dependents of owners deleted with the orphan policy.
//
// As upstream's collector does, a deletion is pinned to the
// resourceVersion of the dependent it was decided on: a dependent that
// gained a live owner meanwhile conflicts and is decided again, not
// deleted. Owners that wait on each other through blocking references (a
// circle of foreground deletions) are freed the way upstream frees them:
// a dependent whose own dependent is already waiting has its references
// made non-blocking before it is deleted in the foreground.
//
// Unlike upstream's collector, which keeps a node for every object of the
// cluster, the graph here holds only objects that have ownerReferences
// (per plane, keyed by uid), so that idle planes and objects nobody owns
// cost nothing; an owner's existence is read from the shared watch cache
// when a dependent needs it, and confirmed with a consistent read before
// anything is deleted. An ownerReference can only ever name an object of
// the dependent's own plane: the uid of another plane's object is an
// absent owner here.
package gc
