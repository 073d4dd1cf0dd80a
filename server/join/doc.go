// Package join lets several kplane servers on one shared datastore be one
// kplane: the same CA, service-account signing key and static tokens on
// every server, handed over through the datastore itself instead of being
// copied between machines.
//
// The first server started with a join token stores those credentials in
// the datastore as one record, sealed with AES-256-GCM under a key derived
// from the token (PBKDF2-SHA256, a random salt per record). A later server
// with the same token reads the record, opens it and writes the credentials
// into its data dir before it issues its own serving certificate from the
// shared CA. The record names its format and the kplane version that wrote
// it, both authenticated with the ciphertext: a wrong token, an altered
// record, an unknown format or another minor version is refused before
// anything is written.
//
// The record is created only if absent (an etcd transaction on its key), so
// servers starting at once on an empty datastore agree on one set: the
// others adopt the winner's.
package join
