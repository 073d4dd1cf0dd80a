// Package fleet keeps Fleets (kplane.dev/v1, cluster-scoped, in the root
// plane): declared sets of planes, for work that wants many identical
// environments at once (parallel RL rollouts, test shards).
//
// A Fleet names its members, spec.replicas planes <prefix><index> or the
// planes in spec.names. The Controller provisions missing members by
// creating their Plane objects, so a member is born exactly like any other
// plane (planes/lifecycle bootstraps it). A Plane belongs to a Fleet when it
// carries the label kplane.dev/fleet=<fleet name>; the label is the only
// record of membership, so adoption, scale-down and convergence after a
// restart all follow from what is stored:
//
//   - a Plane a Fleet names that belongs to nobody (no label, or the label
//     of a Fleet that no longer exists) is adopted: it gets the label;
//   - a Plane another Fleet owns stays with that Fleet, and the member is
//     reported Failed until the owner lets it go;
//   - a labelled Plane the Fleet no longer names (scale-down, a name
//     removed) leaves it according to spec.deletionPolicy: Retain removes
//     the label, Delete deletes the plane with everything in it. Deleting
//     the Fleet does the same to every member, held by a finalizer.
//
// Missing members go to one provisioning queue shared by every Fleet,
// worked by Config.Parallelism provisioners: each creates the member's
// Plane and sends the new plane its first request, within which the plane
// lifecycle bootstraps it exactly as for a first user. Provisioning is thus
// bounded server-wide and runs beside the reconciles, which keep probing
// and reporting while a large Fleet grows.
//
// A member is Ready when its Plane's status.phase is Ready and the plane's
// own /readyz answers ok. The controller works from one workqueue keyed by
// Fleet name, fed by Fleet and Plane informer events (gathered for 50ms),
// and writes a Fleet's status at most once per reconcile; large Fleets
// write progress less often and compact their status to stay within the
// datastore's object size.
package fleet
