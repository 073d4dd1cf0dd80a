// Package daemons runs upstream's DaemonSet controller for the planes that
// have DaemonSets: one instance per such plane, over informers of that
// plane alone, started with its first DaemonSet and stopped with its last.
//
// The other workload controllers serve every plane at once through
// informers whose objects carry their plane in the namespace. The
// DaemonSet controller cannot: it lists every node its informer holds and
// places a DaemonSet's Pods on each, whatever the namespace. A plane
// without DaemonSets (nearly every plane) costs nothing here.
package daemons
