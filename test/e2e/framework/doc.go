// Package framework runs the real kplane binary for end-to-end tests: a
// server on a free loopback port with a temporary data directory, clients
// and kubectl pointed at any plane, and clean shutdown (also when a test
// fails or the test binary dies).
package framework
