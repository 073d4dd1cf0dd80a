// Package auth authenticates and authorizes requests inside the plane they
// address:
//
//   - service-account tokens carry their plane in the issuer and are
//     verified against the plane of the request, with the service account
//     (and bound pod or secret) looked up in that plane: a token of plane A
//     is never valid in plane B, even for a same-named service account;
//   - a TokenReview posted to a plane authenticates its token as a request
//     to that plane would be (TokenReviews): the plane's own
//     service-account tokens only, and the server-wide admin token, which
//     is valid for requests to every plane, in every plane (a review tells
//     its caller nothing a request with the token would not);
//   - the upstream RBAC authorizer is evaluated over the plane's own roles
//     and bindings, read from the shared watch caches (no informers);
//   - impersonation of privileged identities (system:masters, the
//     apiserver, the admin user) is refused to everyone but system:masters,
//     so a plane's cluster-admin never gains power beyond its plane.
package auth
