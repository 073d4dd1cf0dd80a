package e2e

import (
	"testing"

	"kplane.dev/kplane/test/e2e/framework"
)

// The isolation suite on every datastore users move to when they outgrow
// SQLite: embedded etcd, an external etcd cluster, PostgreSQL through kine.

func TestIsolationEmbeddedEtcd(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{Args: []string{"--datastore-endpoint", "etcd"}})
	isolationSuite(t, s)
}

func TestIsolationExternalEtcd(t *testing.T) {
	t.Parallel()
	endpoint := framework.StartEtcd(t)
	s := framework.StartServer(t, framework.Options{Args: []string{"--datastore-endpoint", endpoint}})
	isolationSuite(t, s)
}

func TestIsolationPostgres(t *testing.T) {
	t.Parallel()
	endpoint := framework.StartPostgres(t)
	s := framework.StartServer(t, framework.Options{Args: []string{"--datastore-endpoint", endpoint}})
	isolationSuite(t, s)
}
