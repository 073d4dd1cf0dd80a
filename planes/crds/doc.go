// Package crds serves CustomResourceDefinitions per plane. A CRD stored in
// plane A serves custom resources, discovery and OpenAPI in A and does not
// exist in B.
//
// Upstream apiextensions keeps one CRD handler for the whole server, keyed
// by CRD name. This package keeps, instead:
//
//   - an Index of every plane's CRDs, fed by one cross-plane watch on the
//     CRD storage;
//   - one upstream CRD handler per distinct CRD content (a hash of the
//     spec), shared by every plane that installed an identical CRD, so that
//     compiled schemas, validators, defaulters and SSA type converters exist
//     once however many planes use them. Custom-resource storage is
//     plane-scoped like everything else (/registry/<group>/<resource>/<plane>/…)
//     and its watch cache is shared by all planes;
//   - a Controller that maintains the upstream CRD conditions (NamesAccepted,
//     Established, Terminating) per plane and deletes a CRD's custom
//     resources in its plane before the CRD goes away;
//   - per-plane discovery and OpenAPI documents for the plane's CRDs, merged
//     with the built-in ones.
package crds
