// Package datastore is the one door to the storage behind every plane.
// Listen takes the --datastore-endpoint the user gave and returns etcd API
// endpoints the apiserver connects to, whatever is behind them:
//
//	""                    kine over pure-Go SQLite in <data-dir>/db/state.db
//	"etcd"                embedded etcd in <data-dir>/etcd
//	"http(s)://h1:2379,…" an external etcd cluster
//	"postgres://…"        kine over PostgreSQL
//	"mysql://…"           kine over MySQL
//	"sqlite://<path>"     kine over SQLite at an explicit path
//
// One package per driver sits behind it (kine, etcd), each recognizing its
// own forms and starting what they name behind the datastore/driver
// interface; this package holds the fixed list of drivers and asks them in
// turn. An unreachable or malformed endpoint fails start-up with a one-line
// error naming it.
package datastore
