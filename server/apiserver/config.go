package apiserver

import (
	"context"
	"crypto"
	"fmt"
	"net"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	k8sadmission "k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	unionauth "k8s.io/apiserver/pkg/authentication/request/union"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/apiserver/pkg/util/webhook"
	clientgoinformers "k8s.io/client-go/informers"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	cpoptions "k8s.io/kubernetes/pkg/controlplane/apiserver/options"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"
	"k8s.io/kubernetes/pkg/serviceaccount"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/approval"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/ctbattest"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/signing"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/subjectrestriction"
	"k8s.io/kubernetes/plugin/pkg/admission/defaulttolerationseconds"

	"kplane.dev/kplane/planes/admission"
	"kplane.dev/kplane/planes/audit"
	"kplane.dev/kplane/planes/auth"
	"kplane.dev/kplane/planes/bootstrap"
	"kplane.dev/kplane/planes/crds"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/limits"
	"kplane.dev/kplane/planes/policies"
	"kplane.dev/kplane/planes/quota"
	"kplane.dev/kplane/planes/services"
	"kplane.dev/kplane/planes/simulation"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/planes/webhooks"
	kplanemetrics "kplane.dev/kplane/server/metrics"
	"kplane.dev/kplane/snapshot"
)

// Config is everything the multi-plane apiserver needs from the process
// around it: where to listen, which certificates and credentials to use and
// where the datastore is. The server package fills it in.
type Config struct {
	BindAddress net.IP
	Port        int
	// ExternalURL is how clients reach the server (https://host:port); it is
	// the base of every plane's service-account issuer. Servers joined on
	// one datastore share the first one's, so each accepts the others' tokens.
	ExternalURL string

	ServingCertFile string
	ServingKeyFile  string
	// ClientCAFile verifies client certificates (the kplane CA).
	ClientCAFile string
	// TokenFile is a kube-apiserver static token file (token,user,uid,"groups").
	TokenFile string
	// ServiceAccountKey signs service-account tokens.
	ServiceAccountKey crypto.Signer

	Etcd EtcdConfig

	ServiceClusterIPRange net.IPNet
	NodePortRange         utilnet.PortRange
	// ServiceRepairInterval: how often the plane lifecycle's holder checks
	// every plane's address records against its Services (0: never).
	ServiceRepairInterval time.Duration

	MaxRequestsInFlight         int
	MaxMutatingRequestsInFlight int

	// EnableProfiling serves /debug/pprof on the root plane (admin only).
	EnableProfiling bool

	// DisableControllers runs no generic controllers, and never takes them
	// over from another server.
	DisableControllers bool
	// ServerName names this server on the controllers' Leases.
	ServerName string
	// SoleServer says no other server can share the datastore (SQLite):
	// the controllers' Leases are written once, not campaigned for.
	SoleServer bool
	// DeleteRecords deletes many records in one datastore write, for the
	// wipes of plane deletions and resets (nil: one by one).
	DeleteRecords func(context.Context, []lifecycle.DatastoreRecord) ([]int64, bool, error)
	// Profile is the API surface every plane serves (empty: full).
	Profile Profile
	// Simulation runs workloads in every plane (nil: API only). The
	// generic profile runs none.
	Simulation *simulation.Options

	// CACert is the CA every plane's kube-root-ca.crt ConfigMaps carry.
	CACert []byte
	// CACertSignature signs CACert on /cacerts (empty: served unsigned).
	CACertSignature string
	// CACertJoinSignature signs CACert with the join token on /cacerts
	// (empty: no join token).
	CACertJoinSignature string
	// EtcdMembers, when set, serves the join requests of an embedded etcd
	// cluster below /kplane/etcd/ (package server/members); it
	// authenticates them with the join token itself.
	EtcdMembers http.Handler
	// AdminUser is the name of the admin identity; nobody but
	// system:masters may impersonate it.
	AdminUser string
	// MaxPlanes caps the number of planes (0: no limit).
	MaxPlanes int
	// MaxPlanesPerUser caps the planes one identity makes by first
	// requests (0: no limit).
	MaxPlanesPerUser int
	// PlaneLimits limit every plane whose Plane sets none.
	PlaneLimits limits.Effective
	// FairnessSeats are the seats of the planes' fair queue (0: off).
	FairnessSeats int
	// FairnessCPUs are shared among the active planes (0: off).
	FairnessCPUs int
	// PlaneBootstrap is the RBAC policy new planes start with.
	PlaneBootstrap bootstrap.Policy
	// PlaneBase: new planes made from nothing stand on the base plane of
	// the bootstrap objects (false: each writes its own copy).
	PlaneBase bool
	// MetricsTopPlanes is how many planes get a request series of their
	// own on /metrics; MetricsWindow is the period they are ranked over.
	MetricsTopPlanes int
	MetricsWindow    time.Duration
	// SnapshotStreams bound the snapshot delta streams.
	SnapshotStreams snapshot.StreamLimits
	// ManifestsDir holds manifests kept applied (empty: none).
	ManifestsDir string
	// ReadyzChecks are added to /readyz; a grouped one is also served on
	// /readyz/<group>, its name being free to change.
	ReadyzChecks []healthz.HealthChecker
	// Webhooks configures how planes' admission webhooks are called.
	Webhooks WebhookConfig
	// Audit configures the planes' audit trails.
	Audit AuditConfig
}

// EtcdConfig says how to reach the etcd API of the datastore.
type EtcdConfig struct {
	Endpoints []string
	CAFile    string
	CertFile  string
	KeyFile   string
	// CompactionInterval: how often the apiserver compacts the datastore
	// up to the revision it saw one interval before (0: never).
	CompactionInterval time.Duration
	// InProcess, when set, makes clients of a datastore that runs in the
	// process: the storages call it directly rather than over Endpoints.
	InProcess func() *clientv3.Client
}

// CompletedConfig is a Config with the upstream apiserver configuration
// built from it.
type CompletedConfig struct {
	*completedConfig
}

type completedConfig struct {
	config       *Config
	controlPlane controlplaneapiserver.CompletedConfig
	options      cpoptions.CompletedOptions
	storage      *planestorage.Registry
	// planesAdmission guards Plane objects; New binds it to the plane
	// manager.
	planesAdmission *admission.Planes
	crdGetters      crdGetters
	metrics         *kplanemetrics.Metrics
	// policies are the admission policy plugins; New binds their kind
	// resolver and their built-in types.
	policies *policies.Plugins
	// webhooks are the admission webhook plugins; the plane manager tells
	// them about deleted planes.
	webhooks webhookPlugins
	// audit keeps the planes' trails (nil: auditing off).
	audit *auditParts
	// loopbackHangUp is the serving listener; its filter tells it the
	// in-process clients' connections (nil: nothing to hang up).
	loopbackHangUp *loopbackHangUp
}

// Complete builds the upstream configuration. It touches no network.
func (c *Config) Complete(ctx context.Context) (CompletedConfig, error) {
	if err := setFeatureGates(); err != nil {
		return CompletedConfig{}, err
	}
	stores := newPlaneStorage()
	// Consistent reads come from the watch caches when this server makes
	// every write (planes/storage freshreads.go).
	stores.SetSoleServer(c.SoleServer)
	if c.Etcd.InProcess != nil {
		stores.UseInProcessDatastore(c.Etcd.Endpoints, c.Etcd.InProcess)
	}
	planesAdmission := admission.NewPlanes(lifecycle.Finalizer, c.MaxPlanes)
	policyPlugins := policies.NewPlugins(stores)
	opts := c.upstreamOptions()
	hooks, err := c.newWebhookPlugins(stores)
	if err != nil {
		return CompletedConfig{}, err
	}
	if err := c.registerAdmission(opts, stores, planesAdmission, hooks, policyPlugins); err != nil {
		return CompletedConfig{}, err
	}
	completed, err := opts.Complete(ctx, nil, nil)
	if err != nil {
		return CompletedConfig{}, fmt.Errorf("completing apiserver options: %w", err)
	}
	completed.ServiceAccountIssuer = newPlaneTokenGenerator(c.ExternalURL, c.ServiceAccountKey)

	genericConfig, informers, storageFactory, err := buildGenericConfig(
		completed,
		[]*runtime.Scheme{legacyscheme.Scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme},
		resourceConfig(c.Profile),
		generatedopenapi.GetOpenAPIDefinitions,
	)
	if err != nil {
		return CompletedConfig{}, fmt.Errorf("building apiserver config: %w", err)
	}
	genericConfig.RESTOptionsGetter = stores.Wrap(genericConfig.RESTOptionsGetter)
	// New installs the OpenAPI documents, v2 built on its first request.
	genericConfig.SkipOpenAPIInstallation = true
	hangUp := hangUpLoopbackOnClose(genericConfig.SecureServing.Listener, genericConfig.LoopbackClientConfig)
	if hangUp != nil {
		genericConfig.SecureServing.Listener = hangUp
	}
	auditParts, err := c.newAudit(genericConfig)
	if err != nil {
		return CompletedConfig{}, fmt.Errorf("audit: %w", err)
	}
	if err := c.configureAuth(genericConfig, stores, auditParts); err != nil {
		return CompletedConfig{}, err
	}
	// A delta stream of a snapshot and a followed audit trail are watches
	// for every filter of the chain.
	genericConfig.RequestInfoResolver = auth.WatchablePath{Path: audit.Path, Delegate: auth.WatchablePath{Path: snapshot.Path,
		Delegate: genericapiserver.NewRequestInfoResolver(genericConfig)}}
	// The kplane filters of the chain are made of components that need the
	// server itself (its handlers, discovery, OpenAPI): New builds the chain
	// last, once they exist (handlerChain), so none is bound late.
	genericConfig.BuildHandlerChainFunc = func(apiHandler http.Handler, _ *genericapiserver.Config) http.Handler {
		return apiHandler
	}
	// Hooks that assume one cluster and have no plane-scoped equivalent
	// (the identity Leases' are off with their feature, features.go).
	genericConfig.DisabledPostStartHooks.Insert("start-legacy-token-tracking-controller")
	// Run as in-process work instead (authinfo.go).
	genericConfig.DisabledPostStartHooks.Insert(clusterAuthenticationInfoHook)
	controlPlane, getters, err := controlPlaneConfig(completed, genericConfig, informers, storageFactory)
	if err != nil {
		return CompletedConfig{}, err
	}
	planeMetrics, err := kplanemetrics.New(kplanemetrics.Config{TopPlanes: c.MetricsTopPlanes, Window: c.MetricsWindow})
	if err != nil {
		return CompletedConfig{}, err
	}
	return CompletedConfig{&completedConfig{
		config:          c,
		controlPlane:    controlPlane.Complete(),
		options:         completed,
		storage:         stores,
		planesAdmission: planesAdmission,
		policies:        policyPlugins,
		metrics:         planeMetrics,
		crdGetters:      getters,
		webhooks:        hooks,
		audit:           auditParts,
		loopbackHangUp:  hangUp,
	}}, nil
}

// newPlaneStorage returns the storage registry every API is served from.
// Watch caches share what is identical between planes: CRD schemas, RBAC
// rules.
func newPlaneStorage() *planestorage.Registry {
	stores := planestorage.NewRegistry()
	stores.CacheEveryResource()
	stores.SetCacheTransform(apiextensionsv1.Resource("customresourcedefinitions"), crds.NewSchemas().Intern)
	rules := planestorage.NewInterner()
	stores.SetCacheTransform(rbacv1.Resource("clusterroles"), internRules(rules))
	stores.SetCacheTransform(rbacv1.Resource("roles"), internRules(rules))
	// A plane's Service address records are read only to be changed, with
	// a consistent read: caching them would keep a bitmap per plane in
	// memory (up to 8 KiB on the default range) for nothing.
	stores.SetUncached(services.AllocationsResource)
	return stores
}

// configureAuth replaces upstream authentication and authorization with
// their plane-aware counterparts.
func (c *Config) configureAuth(genericConfig *genericapiserver.Config, stores *planestorage.Registry, auditParts *auditParts) error {
	saTokens, err := auth.NewServiceAccountTokens(c.ExternalURL, c.ServiceAccountKey, genericConfig.Authentication.APIAudiences,
		auth.ServiceAccountRegistries{
			ServiceAccounts: storageGetter{stores: stores, resource: corev1.Resource("serviceaccounts"), namespaced: true},
			Pods:            storageGetter{stores: stores, resource: corev1.Resource("pods"), namespaced: true},
			Secrets:         storageGetter{stores: stores, resource: corev1.Resource("secrets"), namespaced: true},
			Nodes:           storageGetter{stores: stores, resource: corev1.Resource("nodes")},
		})
	if err != nil {
		return err
	}
	// Like every upstream authenticator, the service-account one adds
	// system:authenticated to the groups.
	genericConfig.Authentication.Authenticator = anonymousPublic{delegate: unionauth.New(
		genericConfig.Authentication.Authenticator, group.NewAuthenticatedGroupAdder(bearertoken.New(saTokens)))}
	if auditParts != nil {
		// The audit policy learns the plane's level from the user.
		genericConfig.Authentication.Authenticator = audit.Authenticator{
			Delegate: genericConfig.Authentication.Authenticator, Planes: auditParts.planes}
	}
	rbac := auth.NewRBAC(func(resource string) *planestorage.Store {
		return stores.Storage(rbacv1.Resource(resource))
	})
	genericConfig.RuleResolver = rbac
	genericConfig.Authorization.Authorizer, err = newAuthorizer(c.AdminUser, rbac)
	return err
}

// controlPlaneConfig builds the upstream control-plane configuration and
// takes the storage getters of the apiextensions configuration.
func controlPlaneConfig(completed cpoptions.CompletedOptions, genericConfig *genericapiserver.Config,
	informers clientgoinformers.SharedInformerFactory, storageFactory *serverstorage.DefaultStorageFactory,
) (*controlplaneapiserver.Config, crdGetters, error) {
	controlPlane, _, err := controlplaneapiserver.CreateConfig(completed, genericConfig, informers, nil, storageFactory,
		webhook.NewDefaultServiceResolver(), []k8sadmission.PluginInitializer{admission.LoopbackInitializer{Config: genericConfig.LoopbackClientConfig}})
	if err != nil {
		return nil, crdGetters{}, fmt.Errorf("building control plane config: %w", err)
	}
	// Every plane has an issuer of its own, so one server-wide issuer
	// discovery document (/.well-known/openid-configuration) would be wrong
	// for all but one: none is served, and without an issuer URL upstream
	// says so at info level instead of reporting an error.
	controlPlane.ServiceAccountIssuerURL = ""
	// Every plane's system namespaces are written by its bootstrap. The
	// upstream controller would wait on an informer of the never-started
	// informer factory and log an error at every stop.
	controlPlane.SystemNamespaces = nil
	// Only the storage getters are taken from the apiextensions config: CRDs
	// are served per plane by planes/crds, not by the upstream CRD server.
	apiExtensions, err := controlplaneapiserver.CreateAPIExtensionsConfig(*genericConfig, informers, nil, completed, 1,
		noServiceResolver{}, identityAuthResolverWrapper)
	if err != nil {
		return nil, crdGetters{}, fmt.Errorf("building apiextensions config: %w", err)
	}
	return controlPlane, crdGetters{
		crds:            apiExtensions.GenericConfig.RESTOptionsGetter,
		customResources: apiExtensions.ExtraConfig.CRDRESTOptionsGetter,
	}, nil
}

// http2MaxStreamsPerConnection is the streams a client may have open at
// once on one connection (upstream's recommended options for servers
// built on the generic apiserver).
const http2MaxStreamsPerConnection = 1000

// upstreamOptions translates Config into the options kube-apiserver's
// generic control plane is built from.
func (c *Config) upstreamOptions() *cpoptions.Options {
	o := cpoptions.NewOptions()

	o.SecureServing.BindAddress = c.BindAddress
	o.SecureServing.BindPort = c.Port
	o.SecureServing.ServerCert.CertKey.CertFile = c.ServingCertFile
	o.SecureServing.ServerCert.CertKey.KeyFile = c.ServingKeyFile
	// One client holds a watch or two per plane it drives over one
	// connection pool. At upstream's 100 streams per connection, a burst
	// of requests arriving while every connection is full makes Go's
	// transport dial one new connection per request: 242 TLS handshakes
	// (2.9 % of the server's CPU, as much again in the client) in a
	// 1,000-plane rollout. 1,000 is what upstream recommends for servers
	// built on its generic apiserver.
	o.SecureServing.HTTP2MaxStreamsPerConnection = http2MaxStreamsPerConnection
	o.GenericServerRunOptions.AdvertiseAddress = advertiseAddress(c.BindAddress)
	o.Features.EnablePriorityAndFairness = false
	if c.MaxRequestsInFlight > 0 {
		o.GenericServerRunOptions.MaxRequestsInFlight = c.MaxRequestsInFlight
	}
	if c.MaxMutatingRequestsInFlight > 0 {
		o.GenericServerRunOptions.MaxMutatingRequestsInFlight = c.MaxMutatingRequestsInFlight
	}
	o.GenericServerRunOptions.ShutdownDelayDuration = 0
	o.GenericServerRunOptions.ShutdownWatchTerminationGracePeriod = 5 * time.Second
	o.Features.EnableProfiling = c.EnableProfiling
	// kplane sets none of the metrics options (hidden or disabled metrics,
	// label allow-lists); applying the empty ones only logs "The manifest
	// file is empty" as an error.
	o.Metrics = nil

	o.Etcd.StorageConfig.Transport.ServerList = c.Etcd.Endpoints
	o.Etcd.StorageConfig.Transport.TrustedCAFile = c.Etcd.CAFile
	o.Etcd.StorageConfig.Transport.CertFile = c.Etcd.CertFile
	o.Etcd.StorageConfig.Transport.KeyFile = c.Etcd.KeyFile
	o.Etcd.StorageConfig.CompactionInterval = c.Etcd.CompactionInterval

	o.Authentication.Anonymous.Allow = false
	o.Authentication.ClientCert.ClientCA = c.ClientCAFile
	o.Authentication.TokenFile.TokenFile = c.TokenFile
	o.Authentication.BootstrapToken.Enable = false
	// Service-account tokens carry their plane in the issuer; the plane-aware
	// authenticator verifies them, so no upstream key file is configured.
	o.Authentication.ServiceAccounts.Issuers = []string{c.ExternalURL}
	o.Authentication.ServiceAccounts.Lookup = false
	o.Authentication.ServiceAccounts.KeyFiles = nil
	// Upstream's token getter reads through informers of the root plane
	// (secrets, service accounts, pods, nodes, webhook configurations),
	// which would be started for nothing: the plane-aware authenticator
	// reads every plane's objects itself.
	o.Authentication.ServiceAccounts.OptionalTokenGetter = func(clientgoinformers.SharedInformerFactory) serviceaccount.ServiceAccountTokenGetter {
		return noTokenObjects{}
	}
	o.Authorization.Modes = []string{"AlwaysAllow"}

	return o
}

// registerAdmission sets the admission plugins: only plugins that are
// plane-safe as is, plus kplane's plane-aware ones. Plugins that read
// cluster state through informers would see the root plane only.
// Admission is configured before the APIs are installed: NamespaceLifecycle
// reads namespaces through the storage registry, which exists first.
func (c *Config) registerAdmission(o *cpoptions.Options, stores *planestorage.Registry, planesPlugin *admission.Planes, hooks webhookPlugins,
	policyPlugins *policies.Plugins) error {
	nsLifecycle := admission.NewNamespaceLifecycle(namespaceGetter{
		storageGetter{stores: stores, resource: corev1.Resource("namespaces")}})
	o.Admission.GenericAdmission.Plugins.Register(admission.NamespaceLifecyclePluginName, nsLifecycle.Factory())
	o.Admission.GenericAdmission.Plugins.Register(admission.PlanesPluginName, planesPlugin.Factory())
	rootOwn, err := rootOwnGroups()
	if err != nil {
		return err
	}
	crdGroups := admission.NewCRDGroups(builtinGroups(), rootOwn)
	o.Admission.GenericAdmission.Plugins.Register(admission.CRDGroupsPluginName, crdGroups.Factory())
	quotaObjects := quota.Objects{Registry: stores}
	o.Admission.GenericAdmission.Plugins.Register(admission.LimitRangerPluginName, admission.NewLimitRanger(quotaObjects, !c.SoleServer).Factory())
	o.Admission.GenericAdmission.Plugins.Register(admission.ResourceQuotaPluginName, admission.NewResourceQuota(quotaObjects).Factory())
	o.Admission.GenericAdmission.Plugins.Register(policies.MutatingPluginName, policyPlugins.Mutating.Factory())
	o.Admission.GenericAdmission.Plugins.Register(policies.ValidatingPluginName, policyPlugins.Validating.Factory())
	o.Admission.GenericAdmission.Plugins.Register(webhooks.MutatingPluginName, hooks.mutating.Factory())
	o.Admission.GenericAdmission.Plugins.Register(webhooks.ValidatingPluginName, hooks.validating.Factory())
	// Upstream's order: LimitRanger defaults early, the policies and
	// webhooks come after the built-in plugins, ResourceQuota is the last
	// validating plugin.
	o.Admission.GenericAdmission.RecommendedPluginOrder = []string{
		admission.NamespaceLifecyclePluginName,
		admission.PlanesPluginName,
		admission.CRDGroupsPluginName,
		admission.LimitRangerPluginName,
		defaulttolerationseconds.PluginName,
		approval.PluginName,
		signing.PluginName,
		ctbattest.PluginName,
		subjectrestriction.PluginName,
		policies.MutatingPluginName,
		webhooks.MutatingPluginName,
		policies.ValidatingPluginName,
		webhooks.ValidatingPluginName,
		admission.ResourceQuotaPluginName,
	}
	o.Admission.GenericAdmission.DefaultOffPlugins = nil
	o.Admission.GenericAdmission.EnablePlugins = nil
	o.Admission.GenericAdmission.DisablePlugins = nil
	return nil
}

func advertiseAddress(bind net.IP) net.IP {
	if bind == nil || bind.IsUnspecified() {
		return nil
	}
	return bind
}
