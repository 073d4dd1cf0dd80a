package driver

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Driver runs the datastores of some endpoint forms.
type Driver interface {
	// Kind classifies endpoint: ok is false when it is not this driver's;
	// err reports one of its forms that is malformed (one line, password
	// redacted).
	Kind(endpoint string) (kind Kind, ok bool, err error)
	// Listen starts (or checks) the datastore of config.Endpoint, which
	// Kind classified as kind. ctx bounds the start only.
	Listen(ctx context.Context, kind Kind, config Config) (*Datastore, error)
}

// Kind names the storage behind the etcd API.
type Kind string

// Config selects and configures the datastore.
type Config struct {
	// Endpoint is --datastore-endpoint.
	Endpoint string
	// DataDir holds the embedded stores (db/, etcd/) and their sockets.
	DataDir string
	// CAFile, CertFile, KeyFile: client TLS towards an external etcd or a
	// kine SQL backend that requires it.
	CAFile, CertFile, KeyFile string
	// StartTimeout bounds how long start-up may wait for the datastore.
	StartTimeout time.Duration
	// EmbeddedTLS secures the embedded etcd (server and client certificates).
	EmbeddedTLS TLS
	// Member, when set, makes the embedded etcd a member of a cluster that
	// other servers join over its peer URL; nil: a member alone on loopback.
	Member *Member
	// MetricsRegisterer, when set, receives kine's SQL metrics
	// (kine_sql_time_seconds, ...).
	MetricsRegisterer prometheus.Registerer
}

// TLS holds the certificates of the embedded etcd.
type TLS struct {
	CAFile                        string
	ServerCertFile, ServerKeyFile string
	ClientCertFile, ClientKeyFile string
}

// Member is an embedded etcd that belongs to a cluster of several servers.
type Member struct {
	// Name is the member's name in the cluster (the server's name).
	Name string
	// PeerHost and PeerPort are where the member listens for its peers and
	// what it advertises to them.
	PeerHost string
	PeerPort int
	// PeerCertFile and PeerKeyFile authenticate the member to its peers
	// and them to it; they are issued by the CA of EmbeddedTLS.
	PeerCertFile, PeerKeyFile string
	// InitialCluster lists the members (name=peerURL,…) of the cluster a
	// new member joins, itself included; empty: a new cluster of this
	// member alone. A member with data ignores it.
	InitialCluster string
}

// PeerURL is the URL the member's peers reach it at.
func (m Member) PeerURL() string {
	return "https://" + net.JoinHostPort(m.PeerHost, strconv.Itoa(m.PeerPort))
}

// Datastore is a running (or reachable) datastore.
type Datastore struct {
	Kind Kind
	// Description is safe to log: credentials are redacted.
	Description string
	// Endpoints and the TLS files are what an etcd client connects with.
	Endpoints                 []string
	CAFile, CertFile, KeyFile string
	// BatchDeletes says the etcd API takes a batch of deletions in one
	// transaction (Deleter) and gives each key a revision of its own, as
	// deletions one by one would: kine on SQLite. etcd takes such a
	// transaction too, but puts every deletion at one revision, which a
	// watch resumed from that revision would see only part of.
	BatchDeletes bool
	// InProcess, when set, serves the etcd API in this process: its
	// clients call the datastore directly instead of over Endpoints.
	InProcess InProcess

	stop func()
	done <-chan struct{}
}

// InProcess makes clients of a datastore that runs in this process.
type InProcess interface {
	// NewClient returns a client whose calls are function calls: no
	// connection, no gRPC framing, no encoding of requests and answers.
	// The caller closes it.
	NewClient() *clientv3.Client
}

// Embedded is d run in the process: Close calls stop and then waits for
// done (the store's files closed).
func Embedded(d Datastore, stop func(), done <-chan struct{}) *Datastore {
	d.stop, d.done = stop, done
	return &d
}

// Close stops an embedded datastore and waits until its files are closed.
// It is a no-op for an external one.
func (d *Datastore) Close() {
	if d.stop != nil {
		d.stop()
	}
	if d.done != nil {
		<-d.done
	}
}

// Redact hides the password of an endpoint URL so it can be logged.
func Redact(endpoint string) string {
	scheme, rest, ok := strings.Cut(endpoint, "://")
	if !ok {
		return endpoint
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return endpoint
	}
	user, _, hasPassword := strings.Cut(userinfo, ":")
	if !hasPassword {
		return endpoint
	}
	return scheme + "://" + user + ":***@" + host
}
