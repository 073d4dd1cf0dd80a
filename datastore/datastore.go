package datastore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"kplane.dev/kplane/datastore/driver"
	"kplane.dev/kplane/datastore/etcd"
	"kplane.dev/kplane/datastore/kine"
)

// Kind names the storage behind the etcd API.
type Kind = driver.Kind

// The kinds of datastore, each run by its driver.
const (
	SQLite       = kine.SQLite
	EmbeddedEtcd = etcd.Embedded
	ExternalEtcd = etcd.External
	Postgres     = kine.Postgres
	MySQL        = kine.MySQL
)

// Config selects and configures the datastore.
type Config = driver.Config

// TLS holds the certificates of the embedded etcd.
type TLS = driver.TLS

// Member makes the embedded etcd a member of a cluster of servers.
type Member = driver.Member

// EtcdPeerCommonName is the common name of the embedded etcd members' peer
// certificates.
const EtcdPeerCommonName = etcd.PeerCommonName

// HasEmbeddedEtcd reports whether dataDir holds the data of an embedded
// etcd member that has started before.
func HasEmbeddedEtcd(dataDir string) bool { return etcd.HasData(filepath.Join(dataDir, "etcd")) }

// Datastore is a running (or reachable) datastore; Close stops an
// embedded one.
type Datastore = driver.Datastore

// drivers are the datastores kplane runs on, asked in turn which endpoint
// is theirs. Their forms do not overlap.
func drivers() []driver.Driver {
	return []driver.Driver{kine.Driver{}, etcd.Driver{}}
}

// Listen starts (or checks) the datastore configured in cfg. ctx bounds the
// start only: an embedded store runs until Close, so that the apiserver can
// finish its own shutdown (which writes) before the store goes away.
func Listen(ctx context.Context, cfg Config) (*Datastore, error) {
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	d, kind, err := driverOf(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	return d.Listen(ctx, kind, cfg)
}

// KindOf classifies an endpoint, rejecting malformed ones.
func KindOf(endpoint string) (Kind, error) {
	_, kind, err := driverOf(endpoint)
	return kind, err
}

// driverOf returns the driver whose form endpoint has.
func driverOf(endpoint string) (driver.Driver, Kind, error) {
	for _, d := range drivers() {
		kind, ok, err := d.Kind(endpoint)
		if err != nil {
			return nil, "", err
		}
		if ok {
			return d, kind, nil
		}
	}
	scheme, _, ok := strings.Cut(endpoint, "://")
	if !ok {
		return nil, "", fmt.Errorf("datastore endpoint %q is malformed: want \"\", \"etcd\", http(s)://host:port[,…], postgres://…, mysql://… or sqlite://path", Redact(endpoint))
	}
	return nil, "", fmt.Errorf("datastore endpoint %q: unsupported scheme %q", Redact(endpoint), scheme)
}

// Redact hides the password of an endpoint URL so it can be logged.
func Redact(endpoint string) string { return driver.Redact(endpoint) }

// Deletion is one record a Deleter deletes.
type Deletion = driver.Deletion

// Deleter deletes many records in one transaction.
type Deleter = driver.Deleter
