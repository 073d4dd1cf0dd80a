// Package metrics owns kplane's own Prometheus metrics, served next to the
// upstream apiserver metrics on the root plane's /metrics:
//
//   - kplane_planes{phase}: planes by phase (the root plane excluded);
//   - kplane_requests_total: requests served to planes;
//   - kplane_plane_requests{plane}: requests in the last complete window
//     for the N busiest planes of that window, and plane="_others" for the
//     sum of all the rest. The series count is bounded by N+1 whatever the
//     number of planes; "_others" can never be a plane id (ids are DNS
//     labels).
//
// Counting a request is a lock-free map read and an atomic add; ranking
// happens once per window, off the request path.
package metrics
