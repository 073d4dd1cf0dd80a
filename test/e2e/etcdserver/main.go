// Command etcdserver is the real etcd server, built from the etcd module
// kplane already depends on, so the e2e tests can run kplane against an
// external etcd without downloading anything.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
