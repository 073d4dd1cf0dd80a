// Package lifecycle owns which planes exist. A plane is a Plane object
// (kplane.dev/v1, cluster-scoped) in the root plane; this package
//
//   - provisions a plane when its Plane is created, or when an authorized
//     user's first request reaches an unknown plane id (nothing is written
//     for anyone else);
//   - answers per-plane readiness and refuses requests to planes being
//     deleted;
//   - deletes a plane completely when its Plane is deleted: every object of
//     every resource, built-in and custom, its open watches (closed
//     cleanly) and what caches and controllers keep for it, then releases
//     the Plane;
//   - keeps each Plane's status (phase, object count).
package lifecycle
