// Package driver is the contract between the datastore package, the one
// door to storage, and the packages that run one kind of datastore behind
// the etcd API (datastore/kine, datastore/etcd). Each driver recognizes
// the --datastore-endpoint values that are its own and starts (or checks)
// the datastore they name; the datastore package asks its fixed list of
// drivers in turn.
package driver
