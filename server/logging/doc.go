// Package logging sets up the process's logs: logrus for kplane's own
// messages, and klog (every Kubernetes component) routed through logrus so
// that one format, text or JSON, covers every line the server writes.
package logging
