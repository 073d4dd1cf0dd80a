// Package audit keeps every plane's audit trail with upstream's audit
// machinery (k8s.io/apiserver/pkg/audit): the handler chain's audit filter
// builds the audit.k8s.io Events and upstream's policy evaluator picks their
// level, and this package supplies what upstream cannot know, the plane:
//
//   - Authenticator tags an authenticated request with its plane's level
//     (the evaluator sees only the request's attributes, whose user is the
//     one thing a filter before it can carry) and marks the event with the
//     plane annotation;
//   - Evaluator applies upstream's policy of that level;
//   - Trails is the audit Backend: it files each event under its plane, in
//     a bounded ring in memory (allocated on the plane's first event) and,
//     with a directory, a rotated JSON-lines file per plane; an event over
//     DefaultMaxEventBytes is kept without its bodies, so a full ring is
//     bounded whatever the plane's level;
//   - Handler serves GET /audit of a plane (JSON lines, watch=true follows)
//     to the identities the plane's RBAC lets get/watch kplane.dev "audit".
//
// Nothing runs per plane between requests: no goroutine, no timer.
package audit
