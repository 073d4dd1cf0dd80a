package server

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"kplane.dev/kplane/datastore"
	"kplane.dev/kplane/planes/audit"
	"kplane.dev/kplane/planes/bootstrap"
	"kplane.dev/kplane/planes/limits"
	"kplane.dev/kplane/planes/webhooks"
	"kplane.dev/kplane/server/apiserver"
	"kplane.dev/kplane/server/credentials"
	"kplane.dev/kplane/server/join"
	"kplane.dev/kplane/server/logging"
	"kplane.dev/kplane/snapshot"
)

// Options are the user-facing settings of `kplane server`; every one is a
// flag and a KPLANE_* environment variable.
type Options struct {
	DataDir     string
	BindAddress string
	HTTPSPort   int
	TLSSANs     []string
	TokenFile   string

	DatastoreEndpoint string
	// JoinToken (or the content of JoinTokenFile) makes the servers of one
	// shared datastore one kplane (package server/join).
	JoinToken     string
	JoinTokenFile string
	// ClusterInit makes the embedded etcd the first member of a cluster
	// that servers started with JoinServer join (package server/members).
	ClusterInit bool
	// JoinServer is the URL of a server of that cluster (--server).
	JoinServer string
	// EtcdAdvertiseAddress and EtcdPeerPort are where the embedded etcd
	// member of a cluster listens for its peers (default: --bind-address).
	EtcdAdvertiseAddress string
	EtcdPeerPort         int
	DatastoreCAFile      string
	DatastoreCertFile    string
	DatastoreKeyFile     string
	// CompactionInterval: every interval the datastore is compacted up to
	// the revision of the interval before (kube-apiserver's
	// --etcd-compaction-interval); 0 never compacts.
	CompactionInterval time.Duration

	ServiceCIDR   string
	NodePortRange string
	// ServiceRepairInterval: how often every plane's Service address
	// records are checked against its Services (0: never).
	ServiceRepairInterval time.Duration

	MaxRequestsInFlight         int
	MaxMutatingRequestsInFlight int

	EnableProfiling bool

	// Profile is the API surface of every plane: full (kube-apiserver's) or
	// generic (KEP-4080's generic control plane: no pods, nodes, workloads
	// or services, and no simulation).
	Profile string

	// ServerName names this server among those sharing a datastore (the
	// holder of a controllers Lease); empty: <host name>:<https port>.
	ServerName string

	// DisableControllers runs no generic controllers (namespace deletion,
	// garbage collection, service accounts): planes are API and storage only.
	DisableControllers bool

	// Simulation runs workloads in every plane: upstream workload
	// controllers, simulated nodes, scheduler and kubelet. Off, planes are
	// an API only (pods never run).
	Simulation bool
	// SimulationNodes is the number of simulated nodes of each plane and
	// SimulationNodeCPU, -Memory, -Pods the allocatable of each.
	SimulationNodes      int
	SimulationNodeCPU    string
	SimulationNodeMemory string
	SimulationNodePods   int
	// SimulationRunDuration is how long a run-to-completion pod runs.
	SimulationRunDuration time.Duration
	// SimulationReadyDelay is how long a pod runs before it is Ready.
	SimulationReadyDelay time.Duration

	// MaxPlanes caps the number of planes (0: no limit).
	MaxPlanes int
	// MaxPlanesPerUser caps the planes one identity makes by first
	// requests (0: no limit).
	MaxPlanesPerUser int
	// PlaneMaxObjects, PlaneMaxBytes, PlaneRequestsPerSecond,
	// PlaneRequestBurst and PlaneMaxWatches limit every plane whose Plane
	// sets none (0: no limit).
	PlaneMaxObjects        int64
	PlaneMaxBytes          int64
	PlaneRequestsPerSecond int
	PlaneRequestBurst      int
	PlaneMaxWatches        int
	// PlaneFairness queues requests fairly by plane; PlaneFairnessSeats
	// are the requests executing at once (0: 32 per CPU).
	PlaneFairness      bool
	PlaneFairnessSeats int
	// PlaneFairnessCPUs are shared among the active planes (0: off).
	PlaneFairnessCPUs int
	// PlaneBootstrap is the RBAC a new plane starts with: minimal or full.
	PlaneBootstrap string
	// PlaneBase makes new planes made from nothing layers over one base
	// plane of the bootstrap objects instead of copies of them.
	PlaneBase bool

	// AdminToken, when set, is the admin token of a new token file instead
	// of a generated one: a client that cannot read the data dir (a CI job
	// next to a kplane service container) knows it up front.
	AdminToken string
	// ManifestsDir holds manifests kept applied; default <data-dir>/manifests.
	ManifestsDir string

	// MetricsTopPlanes planes get a request series of their own on
	// /metrics, ranked over MetricsWindow.
	MetricsTopPlanes int
	MetricsWindow    time.Duration

	// LogFormat is text or json; the start banner follows it.
	LogFormat string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// Verbosity is klog's -v for the Kubernetes components' logs.
	Verbosity int

	// SnapshotMaxStreamsPerUser and SnapshotMaxStreams bound the open
	// snapshot delta streams per user of a plane and server-wide (0: no
	// limit); SnapshotMaxStreamTimeout ends every stream at the latest.
	SnapshotMaxStreamsPerUser int
	SnapshotMaxStreams        int
	SnapshotMaxStreamTimeout  time.Duration

	// WebhookEgressAllowCIDRs, when set, are the only addresses the
	// webhooks of planes may be called at; WebhookEgressDenyCIDRs are
	// refused on top of the addresses always refused (link-local, cloud
	// metadata, the datastore).
	WebhookEgressAllowCIDRs []string
	WebhookEgressDenyCIDRs  []string
	// WebhookMaxInFlightPerPlane bounds the webhook calls of one plane in
	// flight at once (0: no bound).
	WebhookMaxInFlightPerPlane int

	// AuditBufferEvents is how many events each plane's audit trail keeps
	// in memory (0: no audit at all); AuditDir, if set, keeps a JSON-lines
	// log per plane there, rotated at AuditMaxFileSize MiB; AuditLevel is
	// the level of planes whose Plane sets none (the root plane's too).
	AuditBufferEvents int
	AuditDir          string
	AuditMaxFileSize  int
	AuditLevel        string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		DataDir:                     DefaultDataDir(),
		BindAddress:                 "127.0.0.1",
		HTTPSPort:                   6443,
		ServiceCIDR:                 "10.96.0.0/16",
		NodePortRange:               "30000-32767",
		ServiceRepairInterval:       3 * time.Minute,
		MaxRequestsInFlight:         800,
		MaxMutatingRequestsInFlight: 400,
		CompactionInterval:          5 * time.Minute,
		EtcdPeerPort:                2380,
		Simulation:                  true,
		SimulationNodes:             3,
		SimulationNodeCPU:           "8",
		SimulationNodeMemory:        "32Gi",
		SimulationNodePods:          110,
		SimulationRunDuration:       time.Second,
		PlaneBootstrap:              "minimal",
		Profile:                     string(apiserver.ProfileFull),
		PlaneBase:                   true,
		PlaneFairness:               true,
		PlaneFairnessCPUs:           runtime.GOMAXPROCS(0),
		MetricsTopPlanes:            20,
		MetricsWindow:               time.Minute,
		LogFormat:                   "text",
		LogLevel:                    "info",
		SnapshotMaxStreamsPerUser:   snapshot.DefaultMaxStreamsPerUser,
		SnapshotMaxStreams:          snapshot.DefaultMaxStreams,
		SnapshotMaxStreamTimeout:    snapshot.DefaultMaxStreamTimeout,
		WebhookMaxInFlightPerPlane:  64,
		AuditBufferEvents:           audit.DefaultBufferEvents,
		AuditMaxFileSize:            audit.DefaultMaxFileBytes >> 20,
		AuditLevel:                  string(audit.DefaultLevel),
	}
}

// DefaultDataDir is /var/lib/kplane for root and ~/.local/share/kplane
// otherwise.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/kplane"
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "kplane")
	}
	return "kplane-data"
}

// Validate checks the options without touching anything.
func (o *Options) Validate() error {
	var errs []string
	for _, validate := range []func() []string{o.validateServing, o.validatePlanes, o.validateObservability,
		o.validateWebhooks, o.validateDatastore} {
		errs = append(errs, validate()...)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// validateServing checks where and how the server serves.
func (o *Options) validateServing() (errs []string) {
	if o.DataDir == "" {
		errs = append(errs, "--data-dir must not be empty")
	}
	if net.ParseIP(o.BindAddress) == nil {
		errs = append(errs, fmt.Sprintf("--bind-address %q is not an IP address", o.BindAddress))
	}
	if o.HTTPSPort < 0 || o.HTTPSPort > 65535 {
		errs = append(errs, fmt.Sprintf("--https-port %d is out of range", o.HTTPSPort))
	}
	for _, san := range o.TLSSANs {
		if strings.TrimSpace(san) == "" || strings.ContainsAny(san, " /") {
			errs = append(errs, fmt.Sprintf("--tls-san %q is neither a host name nor an IP address", san))
		}
	}
	if o.AdminToken != "" {
		if err := credentials.ValidateAdminToken(o.AdminToken); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if _, _, err := net.ParseCIDR(o.ServiceCIDR); err != nil {
		errs = append(errs, fmt.Sprintf("--service-cidr %q: %v", o.ServiceCIDR, err))
	}
	if _, err := utilnet.ParsePortRange(o.NodePortRange); err != nil {
		errs = append(errs, fmt.Sprintf("--service-node-port-range %q: %v", o.NodePortRange, err))
	}
	if o.ServiceRepairInterval < 0 {
		errs = append(errs, fmt.Sprintf("--service-repair-interval %s must not be negative", o.ServiceRepairInterval))
	}
	return errs
}

// validatePlanes checks what every plane gets: its API, bootstrap,
// limits, fair share and simulation.
func (o *Options) validatePlanes() (errs []string) {
	if o.PlaneFairnessCPUs < 0 {
		errs = append(errs, fmt.Sprintf("--plane-fairness-cpus %d must not be negative", o.PlaneFairnessCPUs))
	}
	if o.PlaneFairnessSeats < 0 {
		errs = append(errs, fmt.Sprintf("--plane-fairness-seats %d must not be negative", o.PlaneFairnessSeats))
	}
	if o.MaxPlanesPerUser < 0 {
		errs = append(errs, fmt.Sprintf("--max-planes-per-user %d must not be negative", o.MaxPlanesPerUser))
	}
	if err := o.PlaneLimits().Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if o.MaxPlanes < 0 {
		errs = append(errs, fmt.Sprintf("--max-planes %d must not be negative", o.MaxPlanes))
	}
	if _, err := apiserver.ParseProfile(o.Profile); err != nil {
		errs = append(errs, err.Error())
	}
	if _, err := bootstrap.ParsePolicy(o.PlaneBootstrap); err != nil {
		errs = append(errs, err.Error())
	}
	if _, err := o.simulationOptions(); err != nil {
		errs = append(errs, err.Error())
	}
	return errs
}

// validateObservability checks the metrics, snapshot streams, audit and
// logs.
func (o *Options) validateObservability() (errs []string) {
	if o.MetricsTopPlanes < 1 {
		errs = append(errs, fmt.Sprintf("--metrics-top-planes %d: want at least 1", o.MetricsTopPlanes))
	}
	if o.MetricsWindow < time.Second {
		errs = append(errs, fmt.Sprintf("--metrics-window %s: want at least 1s", o.MetricsWindow))
	}
	if o.SnapshotMaxStreamsPerUser < 0 || o.SnapshotMaxStreams < 0 {
		errs = append(errs, "--snapshot-max-streams-per-user and --snapshot-max-streams must not be negative (0: no limit)")
	}
	if o.SnapshotMaxStreamTimeout < time.Second {
		errs = append(errs, fmt.Sprintf("--snapshot-max-stream-timeout %s: want at least 1s", o.SnapshotMaxStreamTimeout))
	}
	if o.AuditBufferEvents < 0 {
		errs = append(errs, fmt.Sprintf("--audit-buffer-events %d must not be negative (0: no audit)", o.AuditBufferEvents))
	}
	if o.AuditMaxFileSize < 1 {
		errs = append(errs, fmt.Sprintf("--audit-max-file-size %d: want at least 1 (MiB)", o.AuditMaxFileSize))
	}
	if _, err := audit.ParseLevel(o.AuditLevel); err != nil {
		errs = append(errs, "--audit-level: "+err.Error())
	}
	if _, err := logging.NewFormatter(o.LogFormat); err != nil {
		errs = append(errs, err.Error())
	}
	return errs
}

// validateWebhooks checks the planes' admission webhooks' egress.
func (o *Options) validateWebhooks() (errs []string) {
	if _, err := webhooks.ParsePrefixes(o.WebhookEgressAllowCIDRs); err != nil {
		errs = append(errs, "--webhook-egress-allow-cidrs: "+err.Error())
	}
	if _, err := webhooks.ParsePrefixes(o.WebhookEgressDenyCIDRs); err != nil {
		errs = append(errs, "--webhook-egress-deny-cidrs: "+err.Error())
	}
	if o.WebhookMaxInFlightPerPlane < 0 {
		errs = append(errs, "--webhook-max-in-flight-per-plane must not be negative (0: no bound)")
	}
	return errs
}

// validateDatastore checks the datastore, and the join or cluster flags
// that only make sense with its kind.
func (o *Options) validateDatastore() (errs []string) {
	if o.CompactionInterval < 0 {
		errs = append(errs, fmt.Sprintf("--etcd-compaction-interval %s must not be negative", o.CompactionInterval))
	}
	if _, err := datastore.KindOf(o.DatastoreEndpoint); err != nil {
		errs = append(errs, err.Error())
	} else if err := o.validateJoin(); err != nil {
		errs = append(errs, err.Error())
	} else if err := o.validateCluster(); err != nil {
		errs = append(errs, err.Error())
	}
	return errs
}

// maxLimit bounds the flags' rates and watch counts (as the CRD bounds
// spec.limits).
const maxLimit = 1_000_000

// PlaneLimits are the limits by flag of every plane whose Plane sets none.
func (o *Options) PlaneLimits() limits.Effective {
	// Clamped into int32 on both sides so that validation sees a value
	// out of range, not one wrapped around into range.
	clamp := func(v int) int32 { return int32(max(min(v, maxLimit+1), -1)) }
	return limits.Effective{
		MaxObjects: o.PlaneMaxObjects, MaxBytes: o.PlaneMaxBytes,
		RequestsPerSecond: clamp(o.PlaneRequestsPerSecond), RequestBurst: clamp(o.PlaneRequestBurst),
		MaxWatches: clamp(o.PlaneMaxWatches),
	}
}

// defaultSeatsPerCPU: most requests wait on the datastore, not the CPU.
// At 4 per CPU the example operator's 53 parallel cases (one plane each)
// waited up to 15 s in the queue and timed out; at 32 they ran in 14 s
// (11 s without the queue).
const defaultSeatsPerCPU = 32

// FairnessSeats are the seats of the planes' fair queue, 0 when it is off.
func (o *Options) FairnessSeats() int {
	switch {
	case !o.PlaneFairness:
		return 0
	case o.PlaneFairnessSeats > 0:
		return o.PlaneFairnessSeats
	}
	return defaultSeatsPerCPU * runtime.GOMAXPROCS(0)
}

// validateJoin checks the join token options: a join needs a datastore
// that servers on other machines can reach.
func (o *Options) validateJoin() error {
	if o.JoinToken == "" && o.JoinTokenFile == "" {
		return nil
	}
	if o.JoinToken != "" && o.JoinTokenFile != "" {
		return fmt.Errorf("--join-token and --join-token-file: give one")
	}
	if o.JoinToken != "" {
		if err := validateJoinToken(o.JoinToken); err != nil {
			return err
		}
	}
	switch kind, _ := datastore.KindOf(o.DatastoreEndpoint); kind {
	case datastore.SQLite:
		return fmt.Errorf("--join-token needs a datastore several servers share (--datastore-endpoint https://etcd:2379, postgres://… or mysql://…, or an embedded etcd cluster: etcd with --cluster-init or --server); the %s datastore serves this server only", kind)
	case datastore.EmbeddedEtcd:
		if !o.EmbeddedCluster() {
			return fmt.Errorf("--join-token with the embedded etcd needs --cluster-init (the first server) or --server https://first:6443 (the others)")
		}
	}
	return nil
}

// EmbeddedCluster reports whether the embedded etcd is a member of a
// cluster of several servers.
func (o *Options) EmbeddedCluster() bool { return o.ClusterInit || o.JoinServer != "" }

// validateCluster checks the options of an embedded etcd cluster.
func (o *Options) validateCluster() error {
	if !o.EmbeddedCluster() {
		return nil
	}
	if kind, _ := datastore.KindOf(o.DatastoreEndpoint); kind != datastore.EmbeddedEtcd {
		return fmt.Errorf("--cluster-init and --server form an embedded etcd cluster: they need --datastore-endpoint etcd")
	}
	if o.ClusterInit && o.JoinServer != "" {
		return fmt.Errorf("--cluster-init starts a cluster, --server joins one: give one")
	}
	if o.JoinToken == "" && o.JoinTokenFile == "" {
		return fmt.Errorf("an embedded etcd cluster needs a --join-token (e.g. openssl rand -hex 32), the same on every server")
	}
	if o.JoinServer != "" {
		if u, err := url.Parse(o.JoinServer); err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("--server %q: want https://host:port of a server of the cluster", o.JoinServer)
		}
	}
	if o.EtcdPeerPort < 1 || o.EtcdPeerPort > 65535 {
		return fmt.Errorf("--etcd-peer-port %d is out of range", o.EtcdPeerPort)
	}
	if o.EtcdAdvertiseAddress == "" {
		if ip := net.ParseIP(o.BindAddress); ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("--etcd-advertise-address is needed with --bind-address %s: the address the other servers reach this one's etcd peer port at", o.BindAddress)
		}
	} else if strings.ContainsAny(o.EtcdAdvertiseAddress, " /:") && net.ParseIP(o.EtcdAdvertiseAddress) == nil {
		return fmt.Errorf("--etcd-advertise-address %q is neither a host name nor an IP address", o.EtcdAdvertiseAddress)
	}
	return nil
}

// etcdAdvertiseAddress is where the member's peers reach it.
func (o *Options) etcdAdvertiseAddress() string {
	if o.EtcdAdvertiseAddress != "" {
		return o.EtcdAdvertiseAddress
	}
	return o.BindAddress
}

func validateJoinToken(token string) error {
	if len(token) < join.MinTokenLength || strings.ContainsAny(token, " \t\r\n") {
		return fmt.Errorf("--join-token must be at least %d characters without spaces (e.g. openssl rand -hex 32)", join.MinTokenLength)
	}
	return nil
}

// joinToken is the join token, read from --join-token-file if given.
func (o *Options) joinToken() (string, error) {
	if o.JoinTokenFile == "" {
		return o.JoinToken, nil
	}
	data, err := os.ReadFile(o.JoinTokenFile)
	if err != nil {
		return "", fmt.Errorf("--join-token-file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if err := validateJoinToken(token); err != nil {
		return "", fmt.Errorf("--join-token-file %s: %w", o.JoinTokenFile, err)
	}
	return token, nil
}

// soleServer reports whether no other server can share this server's
// datastore: SQLite is one process's file.
func (o *Options) soleServer() bool {
	kind, err := datastore.KindOf(o.DatastoreEndpoint)
	return err == nil && kind == datastore.SQLite
}

// serverName is --server-name, or <host name>:<https port>: unique among
// servers on one host and across hosts.
func (o *Options) serverName() string {
	if o.ServerName != "" {
		return o.ServerName
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "kplane"
	}
	return net.JoinHostPort(host, strconv.Itoa(o.HTTPSPort))
}
