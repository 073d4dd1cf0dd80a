package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/sirupsen/logrus"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/notfoundhandler"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	aggregatorscheme "k8s.io/kube-aggregator/pkg/apiserver/scheme"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"kplane.dev/kplane/fleet"
	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/audit"
	"kplane.dev/kplane/planes/bootstrap"
	"kplane.dev/kplane/planes/controllers"
	"kplane.dev/kplane/planes/crds"
	"kplane.dev/kplane/planes/fairness"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/limits"
	"kplane.dev/kplane/planes/loopback"
	"kplane.dev/kplane/planes/routing"
	"kplane.dev/kplane/planes/services"
	"kplane.dev/kplane/planes/simulation"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/server/binarypages"
	kplanemetrics "kplane.dev/kplane/server/metrics"
	"kplane.dev/kplane/snapshot"
)

// New builds the server in dependency order: the upstream generic control
// plane with every API group installed on plane-scoped storage, the plane
// glue built on those APIs, and last the handler chain made of both.
func (c CompletedConfig) New() (*Server, error) {
	controlPlane, err := c.newControlPlane()
	if err != nil {
		return nil, err
	}
	generic := controlPlane.GenericAPIServer
	loopbackConfig := unlimitedLoopback(generic)
	core, err := c.installAPIs(controlPlane, loopbackConfig)
	if err != nil {
		return nil, err
	}
	customResources, err := c.installCRDs(generic)
	if err != nil {
		return nil, err
	}
	// Every API group is installed: the OpenAPI documents can describe
	// them (planes' CRDs are merged in per plane on request).
	gc := c.controlPlane.Generic.Config
	kept, dropped := narrowDefinitions(gc.OpenAPIV3Config, generic.Handler.GoRestfulContainer)
	logrus.Debugf("OpenAPI definitions: %d of the served types kept, %d others dropped", kept, dropped)
	customResources.SetStaticOpenAPI(installOpenAPI(generic, gc.OpenAPIConfig, gc.OpenAPIV3Config).V2)
	boot, err := c.newBootstrapper(core)
	if err != nil {
		return nil, err
	}
	controllersConfig := controllers.Config{
		Loopback: loopbackConfig, Storage: c.storage, CustomResources: customResources, CACert: c.config.CACert,
		BuiltinDefinitions: servedOnly(generatedopenapi.GetOpenAPIDefinitions, gc.OpenAPIV3Config.Definitions),
	}
	genericControllers, err := controllers.NewTerms(controllersConfig)
	if err != nil {
		return nil, fmt.Errorf("generic controllers: %w", err)
	}
	c.bindPolicies(genericControllers)
	sim, err := newSimulation(c.config.Profile, c.config.Simulation, loopbackConfig, c.storage)
	if err != nil {
		return nil, fmt.Errorf("workload simulation: %w", err)
	}
	var forget []lifecycle.Forgetter
	if core.Services != nil {
		forget = append(forget, core.Services)
	}
	forget = append(forget, customResources, genericControllers, c.metrics, c.planesAdmission,
		c.webhooks.validating, c.webhooks.mutating, c.policies)
	manager, enforcer, err := c.newPlaneManager(loopbackConfig, boot, customResources, withSimulation(c.withAudit(forget), sim))
	if err != nil {
		return nil, err
	}
	bindSimulation(sim, manager)
	if err := fleet.IndexPlanes(manager.Informer()); err != nil {
		return nil, fmt.Errorf("fleet controller: %w", err)
	}
	snapshots := c.newSnapshots(generic, customResources)
	// The server serves FullHandlerChain: until now the bare director
	// (Complete's BuildHandlerChainFunc), with its filters from here on.
	// Nothing is served before Run.
	if generic.Handler.FullHandlerChain, err = c.handlerChain(generic.Handler.Director, manager, enforcer, customResources, snapshots); err != nil {
		return nil, err
	}

	started := components{
		loopback: loopbackConfig, boot: boot, customResources: customResources,
		controllers: genericControllers, planes: manager, simulation: sim, work: newInProcessWork(),
	}
	if core.Services != nil && c.config.ServiceRepairInterval > 0 {
		started.serviceRepair = core.Services.NewRepair(c.config.ServiceRepairInterval)
	}
	electors, err := c.newElectors(started)
	if err != nil {
		return nil, err
	}
	started.electors = electors
	if err := c.installServerEndpoints(generic, planeCensus{manager}, electors, started.work); err != nil {
		return nil, err
	}
	if err := c.addPostStartHooks(generic, started); err != nil {
		return nil, err
	}
	if err := c.addClusterAuthenticationInfo(generic, started); err != nil {
		return nil, err
	}
	// Storages the registries built and never released (the custom
	// resources' handlers release theirs only when a CRD goes) are
	// destroyed with the server: their watches would otherwise hold an
	// embedded etcd's stop for its request timeout (7 s).
	generic.RegisterDestroyFunc(c.storage.Destroy)
	return &Server{
		GenericAPIServer: generic,
		Bootstrapper:     boot,
		Storage:          c.storage,
		Core:             core,
		CRDs:             customResources,
		Planes:           manager,
	}, nil
}

// newControlPlane builds the upstream generic control plane, without APIs
// yet.
func (c CompletedConfig) newControlPlane() (*controlplaneapiserver.Server, error) {
	notFound := notfoundhandler.New(c.controlPlane.Generic.Serializer, genericapifilters.NoMuxAndDiscoveryIncompleteKey)
	server, err := c.controlPlane.New("kplane", genericapiserver.NewEmptyDelegateWithCustomHandler(notFound))
	if err != nil {
		return nil, fmt.Errorf("creating apiserver: %w", err)
	}
	return server, nil
}

// unlimitedLoopback is the in-process client configuration. In-process
// clients are not rate limited (client-go's default is 5 requests per
// second): they serve every plane at once, and the server's max-in-flight
// limits bound them like any client.
func unlimitedLoopback(server *genericapiserver.GenericAPIServer) *rest.Config {
	config := rest.CopyConfig(server.LoopbackClientConfig)
	config.QPS = -1
	return config
}

// installAPIs installs every built-in API group and kplane's API contract,
// and returns the core registries the plane glue writes through.
func (c CompletedConfig) installAPIs(server *controlplaneapiserver.Server, loopbackConfig *rest.Config) (*CoreRegistries, error) {
	core := &coreProvider{
		generic:    c.controlPlane.NewCoreGenericConfig(),
		loopback:   loopback.Routed(loopbackConfig),
		authorizer: c.controlPlane.Generic.Authorization.Authorizer,
		services:   servicesConfig(c.config),
		workloads:  !c.config.Profile.Generic(),
	}
	providers, err := storageProviders(c.controlPlane, c.config.Profile, core, apiRegistrationProvider{getter: c.apiRegistrationGetter()})
	if err != nil {
		return nil, err
	}
	if err := server.InstallAPIs(providers...); err != nil {
		return nil, fmt.Errorf("installing APIs: %w", err)
	}
	if err := installContract(server.GenericAPIServer.Handler.NonGoRestfulMux, c.controlPlane.Generic.Serializer); err != nil {
		return nil, fmt.Errorf("installing the API contract: %w", err)
	}
	return core.registries, nil
}

// newBootstrapper returns what writes a new plane's initial objects.
func (c CompletedConfig) newBootstrapper(core *CoreRegistries) (*bootstrap.Bootstrapper, error) {
	serviceIP, err := firstServiceIP(c.config.ServiceClusterIPRange)
	if err != nil {
		return nil, err
	}
	return bootstrap.New(bootstrap.Config{
		Namespaces:  core.Namespaces,
		Stores:      c.bootstrapStores,
		CACert:      c.config.CACert,
		ServiceIP:   serviceIP,
		ServicePort: int32(c.config.Port),
		Policy:      c.config.PlaneBootstrap,
		NoService:   core.Services == nil,
	}), nil
}

// newPlaneManager returns the manager of the planes that exist, and binds
// what consults it: the Planes admission plugin (configured before any
// API) and the layered storage of template members.
func (c CompletedConfig) newPlaneManager(loopbackConfig *rest.Config, boot *bootstrap.Bootstrapper, customResources *crds.Server,
	forget []lifecycle.Forgetter) (*lifecycle.Manager, *limits.Enforcer, error) {
	counts := planestorage.NewCounts()
	enforcer := limits.New(limits.Config{Defaults: c.config.PlaneLimits, Counts: counts, Stores: c.storage.Stores})
	manager, err := lifecycle.New(lifecycle.Config{
		Loopback:         loopbackConfig,
		Bootstrapper:     boot,
		Authorizer:       c.controlPlane.Generic.Authorization.Authorizer,
		Storage:          c.storage,
		Counts:           counts,
		CustomResources:  customResources,
		Forget:           append(forget, enforcer),
		CopyBootstrap:    !c.config.PlaneBase,
		MaxPlanesPerUser: c.config.MaxPlanesPerUser,
		ServerName:       c.config.ServerName,
		SoleServer:       c.config.SoleServer,
		DeleteRecords:    c.config.DeleteRecords,
	})
	if err != nil {
		return nil, nil, err
	}
	enforcer.Bind(manager)
	c.planesAdmission.SetPlaneCounter(manager)
	c.planesAdmission.SetCloneLimits(enforcer)
	if configMaps := c.storage.Storage(schema.GroupResource{Resource: "configmaps"}); configMaps != nil {
		c.planesAdmission.SetAdmittedStore(configMaps)
	}
	if c.audit != nil {
		c.audit.planes.manager.Store(manager)
	}
	c.storage.SetLayers(manager)
	c.storage.SetCounts(counts)
	c.storage.SetWriteGuard(enforcer)
	c.storage.SetCreateHook(lifecycle.GVR.GroupResource(), manager.ReadyAtCreate)
	return manager, enforcer, nil
}

// newSnapshots returns the snapshot server of every plane.
func (c CompletedConfig) newSnapshots(server *genericapiserver.GenericAPIServer, customResources *crds.Server) *snapshot.Server {
	return snapshot.New(snapshot.Config{
		Storage:         c.storage,
		Authorizer:      c.controlPlane.Generic.Authorization.Authorizer,
		CustomResources: customResources,
		Discovery: []http.Handler{
			server.AggregatedLegacyDiscoveryGroupManager,
			server.AggregatedDiscoveryGroupManager,
		},
		Schemes:    []*runtime.Scheme{legacyscheme.Scheme, apiextensionsapiserver.Scheme, aggregatorscheme.Scheme},
		Serializer: c.controlPlane.Generic.Serializer,
		Streams:    c.config.SnapshotStreams,
	})
}

// handlerChain is the server's full handler chain: plane routing, the
// upstream filters (authentication, authorization, ...), then the plane
// filters in front of the server's own handlers (director).
func (c CompletedConfig) handlerChain(director http.Handler, manager *lifecycle.Manager, enforcer *limits.Enforcer, customResources *crds.Server,
	snapshots *snapshot.Server) (http.Handler, error) {
	gc := c.controlPlane.Generic.Config
	handler := snapshots.Filter(director)
	handler = customResources.Filter(handler)
	handler = c.audit.filter(handler, &audit.Handler{
		Trails: c.audit.trailsOrNil(), Authorizer: gc.Authorization.Authorizer, Serializer: gc.Serializer})
	// Counted after the lifecycle filter: only planes that exist get a
	// counter.
	handler = c.metrics.Filter(handler)
	if c.config.FairnessSeats > 0 {
		queue, err := fairness.New(fairness.Config{Seats: c.config.FairnessSeats, CPUs: c.config.FairnessCPUs, LongRunning: gc.LongRunningFunc})
		if err != nil {
			return nil, err
		}
		// Inside the limits: a request over its plane's rate takes no seat.
		handler = queue.Filter(handler, gc.Serializer)
	}
	// After the lifecycle's filter: the plane exists and a watch is
	// counted in its open watches.
	handler = enforcer.Filter(handler, gc.Serializer)
	handler = manager.Filter(handler, gc.Serializer)
	handler = genericapiserver.DefaultBuildHandlerChain(handler, gc)
	handler = manager.Loading(handler, gc.Serializer)
	return c.loopbackHangUp.Filter(routing.WithRouting(handler, gc.Serializer)), nil
}

// installServerEndpoints adds what the root plane serves besides the APIs:
// the signed CA, the join requests of an embedded etcd cluster, the
// readyz checks of the process, kplane's metrics.
func (c CompletedConfig) installServerEndpoints(server *genericapiserver.GenericAPIServer, census planeCensus, electors *electors,
	work *inProcessWork) error {
	server.Handler.NonGoRestfulMux.Handle(caCertsPath, caCertsHandler(c.config.CACert, c.config.CACertSignature, c.config.CACertJoinSignature))
	if c.config.EtcdMembers != nil {
		server.Handler.NonGoRestfulMux.HandlePrefix(etcdMembersPrefix, c.config.EtcdMembers)
	}
	if err := addReadyzChecks(server, c.config.ReadyzChecks); err != nil {
		return err
	}
	if err := kplanemetrics.Register(c.metrics, kplanemetrics.NewPhaseCollector(census),
		kplanemetrics.NewLeaderCollector(electors.leases())); err != nil {
		return err
	}
	server.AddPostStartHookOrDie("kplane-metrics", func(hook genericapiserver.PostStartHookContext) error {
		work.Go(hook, func(ctx context.Context) { c.metrics.Run(ctx, census) })
		return nil
	})
	return nil
}

// components are what the post-start hooks run.
type components struct {
	loopback        *rest.Config
	boot            *bootstrap.Bootstrapper
	customResources *crds.Server
	controllers     *controllers.Terms
	planes          *lifecycle.Manager
	simulation      *simulation.Simulation
	// serviceRepair keeps the planes' Service address records true (nil:
	// no Services served, or --service-repair-interval 0).
	serviceRepair *services.Repair
	electors      *electors
	work          *inProcessWork
}

// addPostStartHooks starts the plane glue once the server serves, and
// stops it before the server stops accepting requests (inProcessWork).
func (c CompletedConfig) addPostStartHooks(server *genericapiserver.GenericAPIServer, s components) error {
	work := s.work
	server.AddPostStartHookOrDie("kplane-crds", func(hook genericapiserver.PostStartHookContext) error {
		work.Go(hook, s.customResources.Run)
		return work.Do(hook, func(ctx context.Context) error {
			select {
			case <-s.customResources.HasSynced():
			case <-ctx.Done():
			}
			return nil
		})
	})
	server.AddPostStartHookOrDie("kplane-bootstrap-root-plane", func(hook genericapiserver.PostStartHookContext) error {
		return work.Do(hook, func(ctx context.Context) error { return s.boot.Ensure(ctx, planes.Root) })
	})
	server.AddPostStartHookOrDie("kplane-root-crds", func(hook genericapiserver.PostStartHookContext) error {
		return work.Do(hook, func(ctx context.Context) error { return installRootCRDs(ctx, s.loopback) })
	})
	server.AddPostStartHookOrDie("kplane-planes", func(hook genericapiserver.PostStartHookContext) error {
		return work.Do(hook, func(ctx context.Context) error {
			if err := waitForRootCRDs(ctx, s.customResources); err != nil {
				return err
			}
			// The Plane informers list from the watch caches once these
			// hold the stored Planes. Listed earlier, the informers' paged
			// lists of a cache still filling went to the datastore
			// (upstream's KEP-4568) and decoded every stored Plane a
			// second time.
			if err := s.customResources.EnsureStorages(ctx, planes.Root); err != nil {
				return err
			}
			// Runs past the hook: started on the hook's context. Readiness
			// does not wait for the Planes: a request loads its own
			// (lifecycle.Loading) until every one is known.
			work.Go(hook, func(ctx context.Context) {
				waitForWatchCaches(ctx, c.storage.Caches)
				s.planes.Run(ctx)
			})
			return nil
		})
	})
	server.AddPostStartHookOrDie("kplane-controllers", func(hook genericapiserver.PostStartHookContext) error {
		// Campaigning starts at once: the root CRDs the other hooks wait
		// for are established by the holder of the plane lifecycle's
		// Lease. Each term waits for what it needs (controllers address
		// planes with requests that never provision one: they start once
		// every existing plane is known). Readiness waits for the first
		// pass over --manifests-dir when this server runs it, or until
		// another server is seen running it.
		//
		// Nothing is written before the watch caches hold their state: a
		// write in between would make a watch resumed from before a
		// restart answer 410 instead of going on. The Planes' cache
		// aside: nothing writes a Plane before every Plane is known,
		// which follows that cache's list.
		waitForWatchCaches(hook, c.servedCaches)
		s.electors.run(hook, work)
		return work.Do(hook, s.electors.waitForManifests)
	})
	server.AddPostStartHookOrDie("kplane-watch-caches", func(ctx genericapiserver.PostStartHookContext) error {
		// Ready once every watch cache holds its state, as kube-apiserver's
		// storage-readiness hook: clients' first writes come after the
		// caches' lists, so a watch resumed from before a restart goes on.
		// The Planes' cache aside: their writes wait until every Plane is
		// known, which comes after its list.
		waitForWatchCaches(ctx, c.servedCaches)
		return nil
	})
	server.AddPostStartHookOrDie("kplane-release-startup-memory", func(hook genericapiserver.PostStartHookContext) error {
		work.Go(hook, func(ctx context.Context) {
			if err := waitUntilReady(ctx, s.loopback); err != nil {
				if ctx.Err() == nil {
					logrus.WithError(err).Warn("Start-up memory stays in use")
				}
				return
			}
			logrus.Info("Ready")
			if s.planes.WaitForPlanes(ctx) != nil {
				return
			}
			logrus.WithField("planes", s.planes.Count()).Info("Every stored plane is known")
			releaseStartupMemory()
		})
		return nil
	})
	if c.audit != nil {
		server.AddPostStartHookOrDie("kplane-audit", func(hook genericapiserver.PostStartHookContext) error {
			// The logs of planes deleted while the server was down go once
			// every plane is known.
			work.Go(hook, func(ctx context.Context) {
				if s.planes.WaitForPlanes(ctx) == nil {
					c.audit.trails.Sweep()
				}
			})
			return nil
		})
	}
	server.AddPreShutdownHookOrDie("kplane-stop-work", func() error {
		work.Stop(workStopTimeout)
		return nil
	})
	return nil
}

// releaseStartupMemory returns what start-up used and serving does not
// need, once the server is ready (its own /readyz: every post-start hook
// done) and every stored Plane is known. The heap start-up left free goes
// back to the operating system: the runtime would otherwise keep it for minutes
// (its scavenger returns memory slowly), and an idle server would hold
// about twice its live heap. The binary's code and read-only data are
// paged out: start-up touched most of them, an idle server needs about a
// third (package binarypages). Paged out earlier, the pages the last
// post-start hooks touch would stay: about 14 MiB more.
func releaseStartupMemory() {
	debug.FreeOSMemory()
	if advised, err := binarypages.PageOut(); err != nil {
		logrus.WithError(err).Debug("The binary's start-up pages stay resident")
	} else {
		logrus.Debugf("Paged out the binary's start-up pages (%d MiB of mappings)", advised>>20)
	}
}

// waitUntilReady polls the server's /readyz through the loopback client
// until it answers ok or ctx is done.
func waitUntilReady(ctx context.Context, loopback *rest.Config) error {
	client, err := discovery.NewDiscoveryClientForConfig(loopback)
	if err != nil {
		return fmt.Errorf("loopback client: %w", err)
	}
	// Not more often: the page-out that follows must come after the work
	// that starts with readiness has run (polled every 25 ms, the idle
	// server kept 15 MiB more of the binary's pages resident).
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return client.RESTClient().Get().AbsPath("/readyz").Do(ctx).Error() == nil, nil
	})
}

// watchCachesTimeout bounds the wait for the watch caches at start, as
// upstream's storage initialization timeout: past it the server goes on
// and says so rather than never becoming ready.
const watchCachesTimeout = time.Minute

// waitForWatchCaches returns once every watch cache caches returns has
// listed its resource, or after watchCachesTimeout. The set is asked anew
// at every poll: a storage destroyed meanwhile never becomes ready (a CRD
// stored by an older release, replaced by the kplane-root-crds hook while
// its cache was still listing), and the one built for the new content is
// what the informers list from.
func waitForWatchCaches(ctx context.Context, caches func() []*planestorage.Store) {
	ctx, cancel := context.WithTimeout(ctx, watchCachesTimeout)
	defer cancel()
	err := waitFor(ctx, func() bool {
		for _, store := range caches() {
			if store.Cached() && store.ReadinessCheck() != nil {
				return false
			}
		}
		return true
	})
	if errors.Is(err, context.DeadlineExceeded) {
		logrus.Warnf("watch caches not ready after %s; going on", watchCachesTimeout)
	}
}

// waitFor polls synced until it reports true or ctx is done. The waits of
// the post-start hooks are what /readyz waits for: a check costs
// microseconds, a coarser poll would add its interval to every start.
func waitFor(ctx context.Context, synced func() bool) error {
	return wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		return synced(), nil
	})
}

// servedCaches are the watch caches readiness waits for: every one built
// so far but the Planes'. A request loads its plane's Plane from the
// datastore until every Plane is known (lifecycle.Loading).
func (c CompletedConfig) servedCaches() []*planestorage.Store {
	caches := c.storage.Caches()
	out := caches[:0]
	for _, store := range caches {
		if store.Resource() != lifecycle.GVR.GroupResource() {
			out = append(out, store)
		}
	}
	return out
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
