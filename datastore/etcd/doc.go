// Package etcd is the datastore driver for etcd: an external cluster
// (http(s)://host:port,…), or a member embedded in the kplane process
// ("etcd").
//
// The embedded member serves clients on loopback only, with TLS and
// client-certificate authentication, so that no other local process can
// read or write the planes' data. Alone, its peer URL is on loopback too;
// as a member of a cluster of several servers (driver.Member) it listens
// for its peers on the member's peer address over mutual TLS, every peer
// certificate issued by the kplane CA with PeerCommonName. Who joins the
// cluster and when is the server's business (package server/members);
// this package only starts a member as told: a new cluster, a new member
// of an existing one, or a member restarted on its data.
package etcd
