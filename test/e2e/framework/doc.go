// Package framework runs the real kplane binary for end-to-end tests: a
// server on a free loopback port with a temporary data directory, clients
// and kubectl pointed at any plane, and clean shutdown (also when a test
// fails or the test binary dies).
//
// Tests wait for conditions with Eventually (something happens within
// DefaultTimeout) and Consistently (something does not happen during a
// period), never with fixed sleeps, and fail with Require when a tool they
// need is missing: under `make test` nothing passes by skipping.
package framework
