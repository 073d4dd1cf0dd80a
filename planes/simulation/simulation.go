package simulation

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/scale"
	"k8s.io/kubernetes/pkg/controller/cronjob"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/disruption"
	"k8s.io/kubernetes/pkg/controller/endpoint"
	"k8s.io/kubernetes/pkg/controller/endpointslice"
	"k8s.io/kubernetes/pkg/controller/job"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	"k8s.io/kubernetes/pkg/controller/replication"
	"k8s.io/kubernetes/pkg/controller/statefulset"
	"k8s.io/kubernetes/pkg/controller/ttlafterfinished"

	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/loopback"
	"kplane.dev/kplane/planes/simulation/daemons"
	"kplane.dev/kplane/planes/simulation/faults"
	"kplane.dev/kplane/planes/simulation/informers"
	"kplane.dev/kplane/planes/simulation/kubelet"
	"kplane.dev/kplane/planes/simulation/nodes"
	"kplane.dev/kplane/planes/simulation/planeclient"
	"kplane.dev/kplane/planes/simulation/scheduler"
	"kplane.dev/kplane/planes/simulation/volumes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// Options are the user's settings of the simulation.
type Options struct {
	// Nodes is the shape of every plane's simulated nodes.
	Nodes nodes.Shape
	// RunDuration is how long a run-to-completion pod runs.
	RunDuration time.Duration
	// ReadyDelay is how long a pod runs before its containers are ready.
	ReadyDelay time.Duration
	// Workers per upstream controller. kube-controller-manager's
	// --concurrent-*-syncs default is 5 for one cluster; here one
	// controller serves every plane and each sync waits on its writes.
	Workers int
}

// DefaultOptions are three nodes per plane and one second per
// run-to-completion pod.
func DefaultOptions() Options {
	return Options{Nodes: nodes.DefaultShape(), RunDuration: time.Second, Workers: 16}
}

// Config is how the simulation runs.
type Config struct {
	Options
	// Loopback reaches the server as itself (system:masters).
	Loopback *rest.Config
	Storage  *planestorage.Registry
	// Off reports the planes the simulation leaves alone (nil: none).
	Off func(plane string) bool
	// Planes returns what a plane's Plane sets for the kubelet (nil:
	// nothing anywhere).
	Planes func(plane string) kubelet.PlaneSettings
	// Templates tells which planes inherit a template's objects (nil:
	// none), which the controllers see as the member's own.
	Templates informers.Templates
}

// PlaneAnnotation on a Plane (root plane) set to "false" leaves that
// plane's objects to the API alone: no controller, scheduler or kubelet of
// the simulation acts on them. Nothing in the plane can see or change it.
const PlaneAnnotation = "kplane.dev/simulation"

// Simulation is the cluster behind every plane.
type Simulation struct {
	config Config
	client kubernetes.Interface
	// events writes the Events client creates, every plane in turn.
	events *planeclient.Events
	// routed addresses the plane in each call's context (nodes).
	routed    kubernetes.Interface
	provision *nodes.Provisioner
	// kubelet and informers are set once Run built them.
	kubelet   atomic.Pointer[kubelet.Kubelet]
	informers atomic.Pointer[informers.Informers]
}

// New checks the configuration; Run starts the simulation.
func New(config Config) (*Simulation, error) {
	if config.Workers <= 0 {
		config.Workers = DefaultOptions().Workers
	}
	// Never bring a plane into being: work left for a deleted plane fails.
	routedConfig := loopback.Controller(config.Loopback, lifecycle.NoProvisionHeader)
	routedConfig.Wrap(loopback.WithHeader(lifecycle.DecideAfterResetHeader))
	// The endpoints controller writes v1 Endpoints on purpose, as
	// kube-controller-manager does: their deprecation warning is for users.
	routedConfig.WarningHandlerWithContext = rest.NoWarnings{}
	events := planeclient.NewEvents()
	client, err := kubernetes.NewForConfig(planeclient.Config(routedConfig, events, resetRevisions(config.Storage)))
	if err != nil {
		return nil, fmt.Errorf("simulation client: %w", err)
	}
	routed, err := kubernetes.NewForConfig(routedConfig)
	if err != nil {
		return nil, fmt.Errorf("simulation client: %w", err)
	}
	provision, err := nodes.NewProvisioner(routed, config.Nodes)
	if err != nil {
		return nil, err
	}
	return &Simulation{config: config, client: client, events: events, routed: routed, provision: provision}, nil
}

// SetOff sets Config.Off; call it before Run.
func (s *Simulation) SetOff(off func(plane string) bool) { s.config.Off = off }

// SetNodeSpecs sets where a plane's own node shape is found; call it
// before Run.
func (s *Simulation) SetNodeSpecs(spec func(plane string) *nodes.Spec) { s.provision.SetSpecs(spec) }

// SetPlaneSettings sets Config.Planes; call it before Run.
func (s *Simulation) SetPlaneSettings(f func(plane string) kubelet.PlaneSettings) {
	s.config.Planes = f
	s.provision.SetFaults(func(plane string) []faults.Fault { return f(plane).Faults })
}

// SetTemplates sets Config.Templates; call it before Run.
func (s *Simulation) SetTemplates(t informers.Templates) { s.config.Templates = t }

// InheritanceChanged makes the controllers see again what plane inherits
// from a template: it was made from one, or is being deleted. Before Run
// there is nothing to tell: the informers' first list finds it.
func (s *Simulation) InheritanceChanged(plane string) {
	if inf := s.informers.Load(); inf != nil {
		inf.InheritanceChanged(plane)
	}
}

// AwaitRevisions returns once the controllers' informers have been handed
// each storage's events up to the revision upTo gives (a reset's last
// deletions): a plane's reset lets its requests in only then, so that no
// controller decides again from the plane as it was before. Before Run
// there is nothing to wait for.
func (s *Simulation) AwaitRevisions(ctx context.Context, upTo map[*planestorage.Store]int64) {
	if inf := s.informers.Load(); inf != nil {
		inf.AwaitRevisions(ctx, upTo)
	}
}

// PlaneChanged makes the simulation look again at plane's pods: what the
// plane's Plane sets (faults) changed.
func (s *Simulation) PlaneChanged(plane string) {
	if k := s.kubelet.Load(); k != nil {
		k.PlaneChanged(plane)
	}
}

// Run builds the informers and controllers and runs them until ctx is
// done. The storages must exist (the API is installed).
func (s *Simulation) Run(ctx context.Context) error {
	inf, err := informers.New(s.config.Storage, s.config.Off, s.config.Templates)
	if err != nil {
		return err
	}
	s.informers.Store(inf)
	sched, err := scheduler.New(s.client, inf, s.provision)
	if err != nil {
		return err
	}
	kube, err := kubelet.New(kubelet.Config{RunDuration: s.config.RunDuration, ReadyDelay: s.config.ReadyDelay, Planes: s.config.Planes}, s.client, s.routed, inf)
	if err != nil {
		return err
	}
	s.kubelet.Store(kube)
	binder, err := volumes.New(s.client, s.routed, inf)
	if err != nil {
		return err
	}
	runs, err := s.upstream(ctx, inf)
	if err != nil {
		return err
	}
	daemonSets, err := daemons.New(daemons.Config{Client: s.client, Storage: s.config.Storage,
		DaemonSets: inf.DaemonSets.Informer(), Nodes: s.provision.Ensure})
	if err != nil {
		return err
	}
	// Run returns once everything it started has stopped: the server's
	// stop waits for it before it stops serving.
	inf.Start(ctx)
	defer inf.Wait()
	if !inf.WaitForSync(ctx) {
		return ctx.Err()
	}
	var running sync.WaitGroup
	defer running.Wait()
	running.Go(func() { s.events.Run(ctx, eventWriters) })
	running.Go(func() { daemonSets.Run(ctx) })
	running.Go(func() { sched.Run(ctx) })
	running.Go(func() { kube.Run(ctx) })
	running.Go(func() { binder.Run(ctx) })
	for _, run := range runs {
		running.Go(func() { run(ctx, s.config.Workers) })
	}
	logrus.Info("workload simulation running for every plane")
	<-ctx.Done()
	return nil
}

// eventWriters write the controllers' Events: they trail the work that
// made them, and a few are enough to keep up once a burst has passed.
const eventWriters = 2

// upstream builds the upstream workload controllers over the shared
// informers and returns their Run functions.
func (s *Simulation) upstream(ctx context.Context, inf *informers.Informers) ([]func(context.Context, int), error) {
	deployments, err := deployment.NewDeploymentController(ctx, inf.Deployments, inf.ReplicaSets, inf.Pods, s.client)
	if err != nil {
		return nil, fmt.Errorf("deployment controller: %w", err)
	}
	replicaSets := replicaset.NewReplicaSetController(ctx, inf.ReplicaSets, inf.Pods, s.client, replicaset.BurstReplicas)
	replicationControllers := replication.NewReplicationManager(ctx, inf.Pods, inf.ReplicationControllers, s.client,
		replication.BurstReplicas)
	statefulSets := statefulset.NewStatefulSetController(ctx, inf.Pods, inf.StatefulSets, inf.PersistentVolumeClaims,
		inf.ControllerRevisions, s.client)
	jobs, err := job.NewController(ctx, s.client, inf.Pods, inf.Jobs, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("job controller: %w", err)
	}
	cronJobs, err := cronjob.NewControllerV2(ctx, inf.Jobs, inf.CronJobs, s.client)
	if err != nil {
		return nil, fmt.Errorf("cronjob controller: %w", err)
	}
	finished := ttlafterfinished.New(ctx, inf.Jobs, s.client)
	slices := endpointslice.NewController(ctx, inf.Pods, inf.Services, inf.Nodes, inf.EndpointSlices,
		maxEndpointsPerSlice, s.client, 0)
	endpoints := endpoint.NewEndpointController(ctx, inf.Pods, inf.Services, inf.Endpoints, s.client, 0)
	budgets := s.disruption(ctx, inf)
	return []func(context.Context, int){
		deployments.Run, replicaSets.Run, replicationControllers.Run, statefulSets.Run, jobs.Run, cronJobs.Run,
		finished.Run, slices.Run, endpoints.Run, budgets.Run,
	}, nil
}

// disruption builds upstream's PodDisruptionBudget controller. It finds
// the scale of Pods' controllers through its listers for the built-in
// ones (ReplicationController, ReplicaSet, Deployment, StatefulSet); a
// custom resource's scale would need a REST mapping per plane, so a
// budget over Pods of a custom controller reports that it cannot map it.
func (s *Simulation) disruption(ctx context.Context, inf *informers.Informers) *disruption.DisruptionController {
	mapper := meta.NewDefaultRESTMapper(nil)
	scales := scale.New(s.client.CoreV1().RESTClient(), mapper, dynamic.LegacyAPIPathResolverFunc,
		scale.NewDiscoveryScaleKindResolver(s.client.Discovery()))
	return disruption.NewDisruptionController(ctx, inf.Pods, inf.PodDisruptionBudgets, inf.ReplicationControllers,
		inf.ReplicaSets, inf.Deployments, inf.StatefulSets, s.client, mapper, scales, s.client.Discovery())
}

// maxEndpointsPerSlice is kube-controller-manager's default.
const maxEndpointsPerSlice = 100

// resetRevisions reads the planes' reset revisions from registry (nil:
// none).
func resetRevisions(registry *planestorage.Registry) planeclient.ResetRevisions {
	if registry == nil {
		return nil
	}
	return registry.ResetRevision
}

// ForgetPlane implements lifecycle.Forgetter. The simulation holds a
// plane's state only in its informers, which drop it with the deletion
// events of the plane's wipe; nothing else is kept per plane.
func (s *Simulation) ForgetPlane(string) {}
