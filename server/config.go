package server

import (
	"context"
	"crypto"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/server/healthz"

	"kplane.dev/kplane/datastore"
	"kplane.dev/kplane/planes/audit"
	"kplane.dev/kplane/planes/bootstrap"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/server/apiserver"
	"kplane.dev/kplane/server/credentials"
	"kplane.dev/kplane/server/members"
	"kplane.dev/kplane/server/metrics"
	"kplane.dev/kplane/server/version"
	"kplane.dev/kplane/snapshot"
)

// Config is Options resolved into concrete values.
type Config struct {
	Options        Options
	DataDir        string
	BindAddress    net.IP
	ServiceCIDR    net.IPNet
	NodePortRange  utilnet.PortRange
	TLSDir         string
	TokenFile      string
	KubeconfigPath string
	ManifestsDir   string
	// ServerURL is how local clients reach the root plane.
	ServerURL string
	// JoinToken is --join-token or the content of --join-token-file.
	JoinToken string
}

// Config validates the options and resolves them.
func (o *Options) Config() (*Config, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	_, cidr, _ := net.ParseCIDR(o.ServiceCIDR)
	ports, _ := utilnet.ParsePortRange(o.NodePortRange)
	bind := net.ParseIP(o.BindAddress)
	tokenFile := o.TokenFile
	if tokenFile == "" {
		tokenFile = filepath.Join(dataDir, "tokens.csv")
	}
	joinToken, err := o.joinToken()
	if err != nil {
		return nil, err
	}
	manifestsDir := filepath.Join(dataDir, "manifests")
	if o.ManifestsDir != "" {
		if manifestsDir, err = filepath.Abs(o.ManifestsDir); err != nil {
			return nil, err
		}
	}
	return &Config{
		Options:        *o,
		DataDir:        dataDir,
		BindAddress:    bind,
		ServiceCIDR:    *cidr,
		NodePortRange:  *ports,
		TLSDir:         filepath.Join(dataDir, "tls"),
		TokenFile:      tokenFile,
		KubeconfigPath: filepath.Join(dataDir, "admin.kubeconfig"),
		ManifestsDir:   manifestsDir,
		ServerURL:      "https://" + net.JoinHostPort(clientHost(bind), strconv.Itoa(o.HTTPSPort)),
		JoinToken:      joinToken,
	}, nil
}

// clientHost is the address a local client dials for bind.
func clientHost(bind net.IP) string {
	switch {
	case bind.IsUnspecified() && bind.To4() == nil:
		return "::1"
	case bind.IsUnspecified():
		return "127.0.0.1"
	}
	return bind.String()
}

// CompletedConfig is a Config whose credentials exist on disk.
type CompletedConfig struct {
	*Config
	CA *credentials.CA
	// Certificates keeps the leaf certificates renewed while the server runs.
	Certificates      *credentials.Renewer
	AdminToken        string
	ServiceAccountKey crypto.Signer
	EtcdTLS           datastore.TLS
	// dataDirLock is held while the process lives (lockDataDir).
	dataDirLock *os.File
	// ServiceAccountIssuer is the base URL of every plane's service-account
	// token issuer: this server's URL, or, joined with a token, the one
	// every server of the datastore shares (a token names its issuer).
	ServiceAccountIssuer string
	// store is the datastore when joining started it already.
	store *datastore.Datastore
}

// Complete creates the data directory and the credentials (first start) or
// loads them (later starts), and writes the admin kubeconfig. With a join
// token the shared credentials come from (or go to) the datastore first.
func (c *Config) Complete(ctx context.Context) (CompletedConfig, error) {
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return CompletedConfig{}, fmt.Errorf("creating data dir: %w", err)
	}
	if err := checkWritable(c.DataDir); err != nil {
		return CompletedConfig{}, err
	}
	lock, err := lockDataDir(c.DataDir)
	if err != nil {
		return CompletedConfig{}, err
	}
	if c.Options.EmbeddedCluster() {
		return c.completeMember(ctx, lock)
	}
	var store *datastore.Datastore
	issuer := c.ServerURL
	if c.JoinToken != "" {
		if store, issuer, err = c.join(ctx); err != nil {
			return CompletedConfig{}, err
		}
	}
	completed, err := c.completeCredentials(lock)
	if err != nil {
		if store != nil {
			store.Close()
		}
		return CompletedConfig{}, err
	}
	completed.store, completed.ServiceAccountIssuer = store, issuer
	return completed, nil
}

// completeCredentials creates or loads the CA, issues this server's
// certificates from it, and ensures the signing key, the token file and
// the admin kubeconfig.
func (c *Config) completeCredentials(lock *os.File) (CompletedConfig, error) {
	ca, err := credentials.EnsureCA(c.TLSDir)
	if err != nil {
		return CompletedConfig{}, err
	}
	issued := []credentials.Issued{{CertFile: c.servingCert(), KeyFile: c.servingKey(), Leaf: credentials.Leaf{
		CommonName: "kplane", Server: true, DNSNames: c.dnsSANs(), IPs: c.ipSANs(),
	}}}
	etcdTLS := datastore.TLS{
		CAFile:         ca.CertFile,
		ServerCertFile: filepath.Join(c.TLSDir, "etcd-server.crt"), ServerKeyFile: filepath.Join(c.TLSDir, "etcd-server.key"),
		ClientCertFile: filepath.Join(c.TLSDir, "etcd-client.crt"), ClientKeyFile: filepath.Join(c.TLSDir, "etcd-client.key"),
	}
	if kind, _ := datastore.KindOf(c.Options.DatastoreEndpoint); kind == datastore.EmbeddedEtcd {
		issued = append(issued,
			credentials.Issued{CertFile: etcdTLS.ServerCertFile, KeyFile: etcdTLS.ServerKeyFile, Leaf: credentials.Leaf{
				CommonName: "kplane-etcd", Server: true, DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")},
			}},
			credentials.Issued{CertFile: etcdTLS.ClientCertFile, KeyFile: etcdTLS.ClientKeyFile, Leaf: credentials.Leaf{
				CommonName: "kplane-apiserver", Client: true,
			}})
		if c.Options.EmbeddedCluster() {
			issued = append(issued, c.peerCertificate())
		}
	}
	certificates := credentials.NewRenewer(ca, issued...)
	if _, err := certificates.EnsureAll(); err != nil {
		return CompletedConfig{}, err
	}
	saKey, err := credentials.EnsureSigningKey(filepath.Join(c.TLSDir, "service-account.key"))
	if err != nil {
		return CompletedConfig{}, fmt.Errorf("service-account key: %w", err)
	}
	token, err := credentials.EnsureTokenFile(c.TokenFile, c.Options.AdminToken)
	if err != nil {
		return CompletedConfig{}, err
	}
	if err := credentials.WriteKubeconfig(c.KubeconfigPath, credentials.Kubeconfig("kplane", c.ServerURL, ca.PEM, token)); err != nil {
		return CompletedConfig{}, fmt.Errorf("writing %s: %w", c.KubeconfigPath, err)
	}
	return CompletedConfig{Config: c, CA: ca, Certificates: certificates, AdminToken: token, ServiceAccountKey: saKey, EtcdTLS: etcdTLS, dataDirLock: lock}, nil
}

func (c *Config) servingCert() string { return filepath.Join(c.TLSDir, "serving.crt") }
func (c *Config) servingKey() string  { return filepath.Join(c.TLSDir, "serving.key") }

func (c *Config) dnsSANs() []string {
	names := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	if host, err := os.Hostname(); err == nil && host != "" {
		names = append(names, host)
	}
	for _, san := range c.Options.TLSSANs {
		if net.ParseIP(san) == nil {
			names = append(names, san)
		}
	}
	return names
}

func (c *Config) ipSANs() []net.IP {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	if !c.BindAddress.IsUnspecified() && !c.BindAddress.IsLoopback() {
		ips = append(ips, c.BindAddress)
	}
	for _, san := range c.Options.TLSSANs {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
		}
	}
	return ips
}

// New starts the datastore and builds the apiserver on it. Nothing is
// served until Run.
func (c CompletedConfig) New(ctx context.Context) (*Server, error) {
	store := c.store
	if store == nil {
		var err error
		if store, err = c.listenDatastore(ctx, c.EtcdTLS, nil); err != nil {
			return nil, err
		}
	}
	apiConfig := c.apiserverConfig(store)
	membersClient, err := c.serveMembers(apiConfig, store)
	if err != nil {
		store.Close()
		return nil, err
	}
	var deleter *datastore.Deleter
	closeAll := func() {
		if membersClient != nil {
			membersClient.Close()
		}
		if deleter != nil {
			deleter.Close()
		}
		store.Close()
	}
	if deleter, err = store.NewDeleter(); err != nil {
		closeAll()
		return nil, fmt.Errorf("datastore %s: %w", store.Description, err)
	}
	if deleter != nil {
		apiConfig.DeleteRecords = deleteRecords(deleter)
	}
	completed, err := apiConfig.Complete(ctx)
	if err != nil {
		closeAll()
		return nil, err
	}
	api, err := completed.New()
	if err != nil {
		closeAll()
		return nil, err
	}
	return &Server{config: c, datastore: store, api: api, membersClient: membersClient, deleter: deleter}, nil
}

// apiserverConfig is the multi-plane apiserver's configuration from the
// options (validated: their parse errors were reported then) and the
// datastore.
func (c CompletedConfig) apiserverConfig(store *datastore.Datastore) *apiserver.Config {
	policy, _ := bootstrap.ParsePolicy(c.Options.PlaneBootstrap)
	profile, _ := apiserver.ParseProfile(c.Options.Profile)
	sim, _ := c.Options.simulationOptions()
	return &apiserver.Config{
		BindAddress:       c.BindAddress,
		Port:              c.Options.HTTPSPort,
		ExternalURL:       c.ServiceAccountIssuer,
		ServingCertFile:   c.servingCert(),
		ServingKeyFile:    c.servingKey(),
		ClientCAFile:      c.CA.CertFile,
		TokenFile:         c.TokenFile,
		ServiceAccountKey: c.ServiceAccountKey,
		Etcd: apiserver.EtcdConfig{
			Endpoints: store.Endpoints, CAFile: store.CAFile, CertFile: store.CertFile, KeyFile: store.KeyFile,
			CompactionInterval: c.Options.CompactionInterval,
			InProcess:          inProcessClients(store),
		},
		ServiceClusterIPRange:       c.ServiceCIDR,
		NodePortRange:               c.NodePortRange,
		ServiceRepairInterval:       c.Options.ServiceRepairInterval,
		MaxRequestsInFlight:         c.Options.MaxRequestsInFlight,
		MaxMutatingRequestsInFlight: c.Options.MaxMutatingRequestsInFlight,
		EnableProfiling:             c.Options.EnableProfiling,
		DisableControllers:          c.Options.DisableControllers,
		ServerName:                  c.Options.serverName(),
		SoleServer:                  c.Options.soleServer(),
		Profile:                     profile,
		Simulation:                  sim,
		CACert:                      c.CA.PEM,
		CACertSignature:             caSignature(c.AdminToken, c.CA.PEM),
		AdminUser:                   credentials.AdminUser,
		MaxPlanes:                   c.Options.MaxPlanes,
		MaxPlanesPerUser:            c.Options.MaxPlanesPerUser,
		FairnessSeats:               c.Options.FairnessSeats(),
		FairnessCPUs:                c.Options.PlaneFairnessCPUs,
		PlaneLimits:                 c.Options.PlaneLimits(),
		PlaneBootstrap:              policy,
		PlaneBase:                   c.Options.PlaneBase,
		MetricsTopPlanes:            c.Options.MetricsTopPlanes,
		MetricsWindow:               c.Options.MetricsWindow,
		ManifestsDir:                c.ManifestsDir,
		ReadyzChecks:                []healthz.HealthChecker{c.Certificates.ReadyzCheck()},
		SnapshotStreams: snapshot.StreamLimits{
			PerUser: c.Options.SnapshotMaxStreamsPerUser, Total: c.Options.SnapshotMaxStreams, MaxTimeout: c.Options.SnapshotMaxStreamTimeout,
		},
		Audit: apiserver.AuditConfig{
			BufferEvents: c.Options.AuditBufferEvents,
			Dir:          c.Options.AuditDir,
			MaxFileBytes: int64(c.Options.AuditMaxFileSize) << 20,
			DefaultLevel: audit.Level(c.Options.AuditLevel),
		},
		Webhooks: apiserver.WebhookConfig{
			EgressAllow:         c.Options.WebhookEgressAllowCIDRs,
			EgressDeny:          c.Options.WebhookEgressDenyCIDRs,
			MaxInFlightPerPlane: c.Options.WebhookMaxInFlightPerPlane,
			// The SQL database behind kine is the datastore too.
			Datastore: append([]string{c.Options.DatastoreEndpoint}, store.Endpoints...),
		},
	}
}

// inProcessClients makes clients of store when it runs in the process.
func inProcessClients(store *datastore.Datastore) func() *clientv3.Client {
	if store.InProcess == nil {
		return nil
	}
	return store.InProcess.NewClient
}

// deleteRecords is lifecycle's Config.DeleteRecords over deleter.
func deleteRecords(deleter *datastore.Deleter) func(context.Context, []lifecycle.DatastoreRecord) ([]int64, bool, error) {
	return func(ctx context.Context, records []lifecycle.DatastoreRecord) ([]int64, bool, error) {
		deletions := make([]datastore.Deletion, len(records))
		for i, r := range records {
			deletions[i] = datastore.Deletion{Key: r.Key, Revision: r.Revision}
		}
		return deleter.Delete(ctx, deletions)
	}
}

// serveMembers makes the apiserver sign its CA with the join token and,
// on a member of an embedded etcd cluster, serve the join requests of
// other servers (package server/members) through a client of the member,
// which it returns for the server to close.
func (c CompletedConfig) serveMembers(apiConfig *apiserver.Config, store *datastore.Datastore) (*clientv3.Client, error) {
	if c.JoinToken == "" {
		return nil, nil
	}
	apiConfig.CACertJoinSignature = credentials.SignCA(c.JoinToken, c.CA.PEM)
	if !c.Options.EmbeddedCluster() {
		return nil, nil
	}
	client, err := store.Client()
	if err != nil {
		return nil, err
	}
	apiConfig.EtcdMembers = members.Handler{Token: c.JoinToken, Version: version.Version, Client: client}
	return client, nil
}

// listenDatastore starts (or checks) the datastore; embedded is the
// embedded etcd's TLS and member its membership of a cluster (nil: alone),
// unused by the other kinds.
func (c *Config) listenDatastore(ctx context.Context, embedded datastore.TLS, member *datastore.Member) (*datastore.Datastore, error) {
	return datastore.Listen(ctx, datastore.Config{
		Endpoint:    c.Options.DatastoreEndpoint,
		DataDir:     c.DataDir,
		CAFile:      c.Options.DatastoreCAFile,
		CertFile:    c.Options.DatastoreCertFile,
		KeyFile:     c.Options.DatastoreKeyFile,
		EmbeddedTLS: embedded,
		Member:      member,
		// kine's SQL latencies next to the apiserver's own on /metrics.
		MetricsRegisterer: metrics.Registerer(),
	})
}

// caSignature signs the CA for /cacerts with the admin token; a token too
// short to withstand an offline guess (an operator's own token file) signs
// nothing, and clients that need the signature refuse to proceed.
func caSignature(adminToken string, caPEM []byte) string {
	if len(adminToken) < credentials.MinAdminTokenLength {
		return ""
	}
	return credentials.SignCA(adminToken, caPEM)
}
