package apiserver

import (
	"context"
	"crypto"
	"fmt"
	"net"
	"net/http"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	unionauth "k8s.io/apiserver/pkg/authentication/request/union"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/apiserver/pkg/util/notfoundhandler"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	cpoptions "k8s.io/kubernetes/pkg/controlplane/apiserver/options"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/approval"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/ctbattest"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/signing"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/subjectrestriction"
	"k8s.io/kubernetes/plugin/pkg/admission/defaulttolerationseconds"

	"kplane.dev/kplane/fleet"
	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/admission"
	"kplane.dev/kplane/planes/auth"
	"kplane.dev/kplane/planes/bootstrap"
	"kplane.dev/kplane/planes/controllers"
	"kplane.dev/kplane/planes/crds"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/loopback"
	"kplane.dev/kplane/planes/routing"
	"kplane.dev/kplane/planes/simulation"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/server/autoapply"
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
	// the base of every plane's service-account issuer.
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

	MaxRequestsInFlight         int
	MaxMutatingRequestsInFlight int

	// EnableProfiling serves /debug/pprof on the root plane (admin only).
	EnableProfiling bool

	// DisableControllers runs no generic controllers.
	DisableControllers bool
	// Simulation runs workloads in every plane (nil: API only).
	Simulation *simulation.Options

	// CACert is the CA every plane's kube-root-ca.crt ConfigMaps carry.
	CACert []byte
	// CACertSignature signs CACert on /cacerts (empty: served unsigned).
	CACertSignature string
	// AdminUser is the name of the admin identity; nobody but
	// system:masters may impersonate it.
	AdminUser string
	// MaxPlanes caps the number of planes (0: no limit).
	MaxPlanes int
	// PlaneBootstrap is the RBAC policy new planes start with.
	PlaneBootstrap bootstrap.Policy
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
	namespaces   *admission.LateNamespaceGetter
	planeCount   *admission.LatePlaneCounter
	saRegistries *auth.ServiceAccountRegistries
	lifecycle    *lateLifecycle
	crds         *lateCRDs
	snapshots    *lateSnapshots
	crdGetters   crdGetters
	metrics      *kplanemetrics.Metrics
}

// Complete builds the upstream configuration. It touches no network and no
// datastore.
func (c *Config) Complete(ctx context.Context) (CompletedConfig, error) {
	if err := setFeatureGates(); err != nil {
		return CompletedConfig{}, err
	}
	namespaces := &admission.LateNamespaceGetter{}
	planeCount := &admission.LatePlaneCounter{}
	opts, err := c.upstreamOptions(namespaces, planeCount)
	if err != nil {
		return CompletedConfig{}, err
	}
	completed, err := opts.Complete(ctx, nil, nil)
	if err != nil {
		return CompletedConfig{}, fmt.Errorf("completing apiserver options: %w", err)
	}
	completed.ServiceAccountIssuer = newPlaneTokenGenerator(c.ExternalURL, c.ServiceAccountKey)

	genericConfig, informers, storageFactory, err := controlplaneapiserver.BuildGenericConfig(
		completed,
		[]*runtime.Scheme{legacyscheme.Scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme},
		resourceConfig(),
		generatedopenapi.GetOpenAPIDefinitions,
		nil,
	)
	if err != nil {
		return CompletedConfig{}, fmt.Errorf("building apiserver config: %w", err)
	}

	planeStorage := planestorage.NewRegistry()
	// Watch caches share what is identical between planes: CRD schemas,
	// RBAC rules.
	planeStorage.SetCacheTransform(apiextensionsv1.Resource("customresourcedefinitions"), crds.NewSchemas().Intern)
	rules := planestorage.NewInterner()
	planeStorage.SetCacheTransform(rbacv1.Resource("clusterroles"), internRules(rules))
	planeStorage.SetCacheTransform(rbacv1.Resource("roles"), internRules(rules))
	genericConfig.RESTOptionsGetter = planeStorage.Wrap(genericConfig.RESTOptionsGetter)
	saRegistries := &auth.ServiceAccountRegistries{}
	saTokens, err := auth.NewServiceAccountTokens(c.ExternalURL, c.ServiceAccountKey, genericConfig.Authentication.APIAudiences, saRegistries)
	if err != nil {
		return CompletedConfig{}, err
	}
	// Like every upstream authenticator, the service-account one adds
	// system:authenticated to the groups.
	genericConfig.Authentication.Authenticator = anonymousPublic{delegate: unionauth.New(
		genericConfig.Authentication.Authenticator, group.NewAuthenticatedGroupAdder(bearertoken.New(saTokens)))}
	rbac := auth.NewRBAC(func(resource string) *planestorage.Store {
		return planeStorage.Storage(rbacv1.Resource(resource))
	})
	genericConfig.RuleResolver = rbac
	if genericConfig.Authorization.Authorizer, err = newAuthorizer(c.AdminUser, rbac); err != nil {
		return CompletedConfig{}, err
	}
	// A delta stream of a snapshot is a watch for every filter of the chain.
	genericConfig.RequestInfoResolver = snapshot.RequestInfoResolver{Delegate: genericapiserver.NewRequestInfoResolver(genericConfig)}
	planeLifecycle := &lateLifecycle{}
	customResources := &lateCRDs{}
	snapshots := &lateSnapshots{}
	planeMetrics, err := kplanemetrics.New(kplanemetrics.Config{
		TopPlanes: c.MetricsTopPlanes,
		Window:    c.MetricsWindow,
		Phases:    planeLifecycle.phases,
		Exists:    planeLifecycle.exists,
	})
	if err != nil {
		return CompletedConfig{}, err
	}
	genericConfig.BuildHandlerChainFunc = func(apiHandler http.Handler, gc *genericapiserver.Config) http.Handler {
		handler := snapshots.filter(apiHandler)
		handler = customResources.filter(handler)
		// Counted after the lifecycle filter: only planes that exist get a
		// counter.
		handler = planeMetrics.Filter(handler)
		handler = planeLifecycle.filter(handler, gc.Serializer)
		handler = genericapiserver.DefaultBuildHandlerChain(handler, gc)
		return routing.WithRouting(handler, gc.Serializer)
	}
	// Hooks that assume one cluster and have no plane-scoped equivalent.
	genericConfig.DisabledPostStartHooks.Insert(
		"start-kube-apiserver-identity-lease-garbage-collector",
		"start-legacy-token-tracking-controller",
	)

	controlPlane, _, err := controlplaneapiserver.CreateConfig(completed, genericConfig, informers, nil, storageFactory,
		webhook.NewDefaultServiceResolver(), nil)
	if err != nil {
		return CompletedConfig{}, fmt.Errorf("building control plane config: %w", err)
	}
	// Every plane has an issuer of its own, so one server-wide issuer
	// discovery document (/.well-known/openid-configuration) would be wrong
	// for all but one: none is served, and without an issuer URL upstream
	// says so at info level instead of reporting an error.
	controlPlane.ServiceAccountIssuerURL = ""
	// Only the storage getters are taken from the apiextensions config: CRDs
	// are served per plane by planes/crds, not by the upstream CRD server.
	apiExtensions, err := controlplaneapiserver.CreateAPIExtensionsConfig(*genericConfig, informers, nil, completed, 1,
		noServiceResolver{}, identityAuthResolverWrapper)
	if err != nil {
		return CompletedConfig{}, fmt.Errorf("building apiextensions config: %w", err)
	}

	return CompletedConfig{&completedConfig{
		config:       c,
		controlPlane: controlPlane.Complete(),
		options:      completed,
		storage:      planeStorage,
		namespaces:   namespaces,
		planeCount:   planeCount,
		saRegistries: saRegistries,
		lifecycle:    planeLifecycle,
		crds:         customResources,
		metrics:      planeMetrics,
		snapshots:    snapshots,
		crdGetters: crdGetters{
			crds:            apiExtensions.GenericConfig.RESTOptionsGetter,
			customResources: apiExtensions.ExtraConfig.CRDRESTOptionsGetter,
		},
	}}, nil
}

// upstreamOptions translates Config into the options kube-apiserver's
// generic control plane is built from.
func (c *Config) upstreamOptions(namespaces admission.NamespaceGetter, planeCount admission.PlaneCounter) (*cpoptions.Options, error) {
	o := cpoptions.NewOptions()

	o.SecureServing.BindAddress = c.BindAddress
	o.SecureServing.BindPort = c.Port
	o.SecureServing.ServerCert.CertKey.CertFile = c.ServingCertFile
	o.SecureServing.ServerCert.CertKey.KeyFile = c.ServingKeyFile
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
	o.Authorization.Modes = []string{"AlwaysAllow"}

	// Admission: only plugins that are plane-safe as is, plus kplane's
	// plane-aware NamespaceLifecycle. Plugins that read cluster state
	// through informers would see the root plane only.
	nsLifecycle := admission.NewNamespaceLifecycle(namespaces)
	o.Admission.GenericAdmission.Plugins.Register(admission.NamespaceLifecyclePluginName, nsLifecycle.Factory())
	planesPlugin := admission.NewPlanes(lifecycle.Finalizer, c.MaxPlanes, planeCount)
	o.Admission.GenericAdmission.Plugins.Register(admission.PlanesPluginName, planesPlugin.Factory())
	rootOwn, err := rootOwnGroups()
	if err != nil {
		return nil, err
	}
	crdGroups := admission.NewCRDGroups(builtinGroups(), rootOwn)
	o.Admission.GenericAdmission.Plugins.Register(admission.CRDGroupsPluginName, crdGroups.Factory())
	o.Admission.GenericAdmission.RecommendedPluginOrder = []string{
		admission.NamespaceLifecyclePluginName,
		admission.PlanesPluginName,
		admission.CRDGroupsPluginName,
		defaulttolerationseconds.PluginName,
		approval.PluginName,
		signing.PluginName,
		ctbattest.PluginName,
		subjectrestriction.PluginName,
	}
	o.Admission.GenericAdmission.DefaultOffPlugins = nil
	o.Admission.GenericAdmission.EnablePlugins = nil
	o.Admission.GenericAdmission.DisablePlugins = nil
	return o, nil
}

func advertiseAddress(bind net.IP) net.IP {
	if bind == nil || bind.IsUnspecified() {
		return nil
	}
	return bind
}

// New builds the server: the upstream generic control plane with every
// API group installed on plane-scoped storage.
func (c CompletedConfig) New() (*Server, error) {
	notFound := notfoundhandler.New(c.controlPlane.Generic.Serializer, genericapifilters.NoMuxAndDiscoveryIncompleteKey)
	server, err := c.controlPlane.New("kplane", genericapiserver.NewEmptyDelegateWithCustomHandler(notFound))
	if err != nil {
		return nil, fmt.Errorf("creating apiserver: %w", err)
	}

	// In-process clients are not rate limited (client-go's default is 5
	// requests per second): they serve every plane at once, and the
	// server's max-in-flight limits bound them like any client.
	loopbackConfig := rest.CopyConfig(server.GenericAPIServer.LoopbackClientConfig)
	loopbackConfig.QPS = -1
	core := &coreProvider{
		generic:    c.controlPlane.NewCoreGenericConfig(),
		loopback:   loopback.Routed(loopbackConfig),
		authorizer: c.controlPlane.Generic.Authorization.Authorizer,
		services:   servicesConfig(c.config),
	}
	providers, err := storageProviders(c.controlPlane, core, apiRegistrationProvider{getter: c.apiRegistrationGetter()})
	if err != nil {
		return nil, err
	}
	if err := server.InstallAPIs(providers...); err != nil {
		return nil, fmt.Errorf("installing APIs: %w", err)
	}
	if err := installContract(server.GenericAPIServer.Handler.NonGoRestfulMux, c.controlPlane.Generic.Serializer); err != nil {
		return nil, fmt.Errorf("installing the API contract: %w", err)
	}

	customResources, err := c.installCRDs(server.GenericAPIServer)
	if err != nil {
		return nil, err
	}
	c.crds.s.Store(customResources)
	server.GenericAPIServer.AddPostStartHookOrDie("kplane-crds", func(ctx genericapiserver.PostStartHookContext) error {
		go customResources.Run(ctx)
		select {
		case <-customResources.HasSynced():
		case <-ctx.Done():
		}
		return nil
	})

	c.namespaces.Set(namespaceGetter{core.registries.Namespaces})
	c.saRegistries.ServiceAccounts = core.registries.ServiceAccounts
	c.saRegistries.Pods = core.registries.Pods
	c.saRegistries.Secrets = core.registries.Secrets
	c.saRegistries.Nodes = core.registries.Nodes

	boot := bootstrap.New(bootstrap.Config{
		Namespaces:  core.registries.Namespaces,
		Stores:      c.bootstrapStores,
		CACert:      c.config.CACert,
		ServiceIP:   firstServiceIP(c.config.ServiceClusterIPRange),
		ServicePort: int32(c.config.Port),
		Policy:      c.config.PlaneBootstrap,
	})

	generic, err := controllers.New(controllers.Config{
		Loopback: loopbackConfig, Storage: c.storage, CustomResources: customResources, CACert: c.config.CACert,
	})
	if err != nil {
		return nil, fmt.Errorf("generic controllers: %w", err)
	}

	sim, err := newSimulation(c.config.Simulation, loopbackConfig, c.storage)
	if err != nil {
		return nil, fmt.Errorf("workload simulation: %w", err)
	}
	manager, err := lifecycle.New(lifecycle.Config{
		Loopback:        loopbackConfig,
		Bootstrapper:    boot,
		Authorizer:      c.controlPlane.Generic.Authorization.Authorizer,
		Storage:         c.storage,
		Counts:          planestorage.NewCounts(),
		CustomResources: customResources,
		Forget:          withSimulation([]lifecycle.Forgetter{core.registries.Services, customResources, generic, c.metrics}, sim),
	})
	if err != nil {
		return nil, err
	}
	c.planeCount.PlaneCounter = manager
	c.storage.SetLayers(manager)
	c.lifecycle.m.Store(manager)
	fleets, err := fleet.New(fleet.Config{Loopback: loopbackConfig, Planes: manager.Informer()})
	if err != nil {
		return nil, fmt.Errorf("fleet controller: %w", err)
	}
	c.snapshots.s.Store(snapshot.New(snapshot.Config{
		Storage:         c.storage,
		Authorizer:      c.controlPlane.Generic.Authorization.Authorizer,
		CustomResources: customResources,
		Discovery: []http.Handler{
			server.GenericAPIServer.AggregatedLegacyDiscoveryGroupManager,
			server.GenericAPIServer.AggregatedDiscoveryGroupManager,
		},
		Schemes:    []*runtime.Scheme{legacyscheme.Scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme},
		Serializer: c.controlPlane.Generic.Serializer,
		Streams:    c.config.SnapshotStreams,
	}))

	server.GenericAPIServer.Handler.NonGoRestfulMux.Handle(caCertsPath, caCertsHandler(c.config.CACert, c.config.CACertSignature))
	if err := addReadyzChecks(server.GenericAPIServer, c.config.ReadyzChecks); err != nil {
		return nil, err
	}
	if err := c.metrics.Register(); err != nil {
		return nil, err
	}
	server.GenericAPIServer.AddPostStartHookOrDie("kplane-metrics", func(ctx genericapiserver.PostStartHookContext) error {
		go c.metrics.Run(ctx)
		return nil
	})

	if c.config.ManifestsDir != "" {
		applier, err := autoapply.New(autoapply.Config{Dir: c.config.ManifestsDir, Loopback: loopbackConfig})
		if err != nil {
			return nil, err
		}
		// Readiness waits for the first pass over the manifests, so that
		// a client that sees /readyz ok also sees what they define.
		server.GenericAPIServer.AddPostStartHookOrDie("kplane-manifests", func(ctx genericapiserver.PostStartHookContext) error {
			// Manifests may create planes: the plane manager must be running.
			if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
				return manager.HasSynced(), nil
			}); err != nil {
				return nil
			}
			firstPass := make(chan struct{})
			go applier.Run(ctx, firstPass)
			select {
			case <-firstPass:
			case <-ctx.Done():
			}
			return nil
		})
	}

	server.GenericAPIServer.AddPostStartHookOrDie("kplane-bootstrap-root-plane", func(ctx genericapiserver.PostStartHookContext) error {
		return boot.Ensure(ctx, planes.Root)
	})
	server.GenericAPIServer.AddPostStartHookOrDie("kplane-root-crds", func(ctx genericapiserver.PostStartHookContext) error {
		return installRootCRDs(ctx, loopbackConfig)
	})
	server.GenericAPIServer.AddPostStartHookOrDie("kplane-planes", func(ctx genericapiserver.PostStartHookContext) error {
		if err := waitForRootCRDs(ctx, loopbackConfig); err != nil {
			return err
		}
		go manager.Run(ctx)
		return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
			return manager.HasSynced(), nil
		})
	})

	server.GenericAPIServer.AddPostStartHookOrDie("kplane-generic-controllers", func(ctx genericapiserver.PostStartHookContext) error {
		// Controllers address planes with requests that never provision
		// one: they start once every existing plane is known.
		if c.config.DisableControllers {
			return nil
		}
		go func() {
			if wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
				return manager.HasSynced(), nil
			}) == nil {
				generic.Run(ctx, manager)
			}
		}()
		return nil
	})

	addSimulationHook(server.GenericAPIServer, sim, manager)

	server.GenericAPIServer.AddPostStartHookOrDie("kplane-fleets", func(ctx genericapiserver.PostStartHookContext) error {
		if err := waitForRootCRDs(ctx, loopbackConfig); err != nil {
			return err
		}
		go fleets.Run(ctx)
		return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
			return fleets.HasSynced(), nil
		})
	})

	s := &Server{
		GenericAPIServer: server.GenericAPIServer,
		Bootstrapper:     boot,
		Storage:          c.storage,
		Core:             core.registries,
		CRDs:             customResources,
		Planes:           manager,
		Fleets:           fleets,
	}
	return s, nil
}

// bootstrapGroups are the groups of the non-core resources bootstrap writes.
var bootstrapGroups = map[string]string{
	"clusterroles": rbacv1.GroupName, "clusterrolebindings": rbacv1.GroupName,
	"roles": rbacv1.GroupName, "rolebindings": rbacv1.GroupName,
	"flowschemas": flowcontrolv1.GroupName, "prioritylevelconfigurations": flowcontrolv1.GroupName,
}

// bootstrapStores returns the plane-scoped storage of a resource bootstrap
// writes (core unless bootstrapGroups says otherwise).
func (c CompletedConfig) bootstrapStores(resource string) *planestorage.Store {
	return c.storage.Storage(schema.GroupResource{Group: bootstrapGroups[resource], Resource: resource})
}
