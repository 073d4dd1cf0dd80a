// Package policies serves ValidatingAdmissionPolicy and
// MutatingAdmissionPolicy in every plane with one instance of each
// admission plugin: upstream's compilers, matchers and dispatchers, fed
// with the policies, bindings, params and namespaces of the request's own
// plane, read from the shared watch caches. A plane without bindings costs
// one read of the cache per request; nothing runs for it in between.
package policies
