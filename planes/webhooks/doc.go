// Package webhooks runs upstream's ValidatingAdmissionWebhook and
// MutatingAdmissionWebhook for every plane: a plane's webhook
// configurations, namespaces, Services and EndpointSlices are read from the
// shared watch caches, and its webhooks are called only for requests of that
// plane, through an egress policy and a bound on the plane's concurrent
// calls.
package webhooks
