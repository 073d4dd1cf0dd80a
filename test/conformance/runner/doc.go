// Command runner runs the upstream Kubernetes e2e suite (e2e.test) against one
// kplane plane, one e2e.test process per spec.
//
// Ginkgo has no per-spec timeout on its command line (only specs that set
// SpecTimeout have one), so a spec that waits for something a plane never
// does would eat the whole run. The runner therefore lists the focused specs
// with a dry run, runs each in its own process whose suite timeout is the
// per-spec timeout (a hard kill follows if the process outlives it), and
// writes the outcome of every spec, with the reason for each skip and
// failure, as JSON and as a Markdown table.
//
// `make conformance` (scripts/conformance.sh) starts the server, mints the
// plane's kubeconfig and calls the runner.
package main
