package informers

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	policyinformers "k8s.io/client-go/informers/policy/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	planestorage "kplane.dev/kplane/planes/storage"
)

// Informers are one client-go informer per resource for every plane,
// filled from the shared watch caches (no watch of their own on the
// datastore, no informer per plane). Their objects carry the plane folded
// into the namespace (nodes: the name), see planens.
type Informers struct {
	Deployments            appsinformers.DeploymentInformer
	ReplicaSets            appsinformers.ReplicaSetInformer
	ReplicationControllers coreinformers.ReplicationControllerInformer
	StatefulSets           appsinformers.StatefulSetInformer
	ControllerRevisions    appsinformers.ControllerRevisionInformer
	PersistentVolumeClaims coreinformers.PersistentVolumeClaimInformer
	Jobs                   batchinformers.JobInformer
	CronJobs               batchinformers.CronJobInformer
	Pods                   coreinformers.PodInformer
	Services               coreinformers.ServiceInformer
	Endpoints              coreinformers.EndpointsInformer
	Nodes                  coreinformers.NodeInformer
	EndpointSlices         discoveryinformers.EndpointSliceInformer
	PodDisruptionBudgets   policyinformers.PodDisruptionBudgetInformer
	DaemonSets             appsinformers.DaemonSetInformer

	all []cache.SharedIndexInformer
	// stages order the informers for a plane's inherited objects: what
	// the controllers of a later stage read (Pods, ReplicaSets) is in
	// place before they hear of what they act on (ReplicaSets,
	// Deployments), as at start, when every informer syncs first.
	stages [][]informerSource
	// inheriting queues the planes whose inherited objects changed.
	inheriting workqueue.TypedInterface[string]
	templates  Templates
	// running counts what Start started.
	running sync.WaitGroup
}

// informerSource is an informer and the source that feeds it.
type informerSource struct {
	informer cache.SharedIndexInformer
	source   *source
}

// New builds the informers over registry's storages; Start runs them.
// off (nil: none) names the planes whose objects are left out; templates
// (nil: none) tells which planes inherit a template's objects.
func New(registry *planestorage.Registry, off func(plane string) bool, templates Templates) (*Informers, error) {
	i := &Informers{templates: templates, inheriting: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{
		Name: "kplane_simulation_inheritance"})}
	var err error
	built := map[cache.SharedIndexInformer]*source{}
	build := func(gr schema.GroupResource, k kind) cache.SharedIndexInformer {
		if err != nil {
			return nil
		}
		var inf cache.SharedIndexInformer
		var src *source
		inf, src, err = newInformer(registry, gr, k, func(store *planestorage.Store) *source {
			return newSource(store, k, off, templates)
		})
		if err != nil {
			return nil
		}
		i.all = append(i.all, inf)
		built[inf] = src
		return inf
	}
	i.Deployments = deploymentInformer{build(schema.GroupResource{Group: "apps", Resource: "deployments"}, deployments)}
	i.ReplicaSets = replicaSetInformer{build(schema.GroupResource{Group: "apps", Resource: "replicasets"}, replicaSets)}
	i.ReplicationControllers = replicationControllerInformer{build(schema.GroupResource{Resource: "replicationcontrollers"}, replicationControllers)}
	i.StatefulSets = statefulSetInformer{build(schema.GroupResource{Group: "apps", Resource: "statefulsets"}, statefulSets)}
	i.ControllerRevisions = controllerRevisionInformer{build(schema.GroupResource{Group: "apps", Resource: "controllerrevisions"}, controllerRevisions)}
	i.PersistentVolumeClaims = persistentVolumeClaimInformer{build(schema.GroupResource{Resource: "persistentvolumeclaims"}, persistentVolumeClaims)}
	i.Endpoints = endpointsInformer{build(schema.GroupResource{Resource: "endpoints"}, endpoints)}
	i.PodDisruptionBudgets = podDisruptionBudgetInformer{build(schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}, podDisruptionBudgets)}
	i.Jobs = jobInformer{build(schema.GroupResource{Group: "batch", Resource: "jobs"}, jobs)}
	i.CronJobs = cronJobInformer{build(schema.GroupResource{Group: "batch", Resource: "cronjobs"}, cronJobs)}
	i.Pods = podInformer{build(schema.GroupResource{Resource: "pods"}, pods)}
	i.Services = serviceInformer{build(schema.GroupResource{Resource: "services"}, services)}
	i.Nodes = nodeInformer{build(schema.GroupResource{Resource: "nodes"}, nodes)}
	i.EndpointSlices = endpointSliceInformer{build(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, endpointSlices)}
	i.DaemonSets = daemonSetInformer{build(daemonSetsResource, daemonSets)}
	if err != nil {
		return nil, err
	}
	for _, stage := range [][]cache.SharedIndexInformer{
		{i.Nodes.Informer(), i.Pods.Informer(), i.PersistentVolumeClaims.Informer(), i.ControllerRevisions.Informer(),
			i.EndpointSlices.Informer(), i.Endpoints.Informer()},
		{i.ReplicaSets.Informer(), i.ReplicationControllers.Informer(), i.Jobs.Informer(), i.Services.Informer()},
		{i.Deployments.Informer(), i.StatefulSets.Informer(), i.CronJobs.Informer(), i.PodDisruptionBudgets.Informer(),
			i.DaemonSets.Informer()},
	} {
		var sources []informerSource
		for _, inf := range stage {
			sources = append(sources, informerSource{informer: inf, source: built[inf]})
		}
		i.stages = append(i.stages, sources)
	}
	return i, nil
}

// Start runs every informer until ctx is done.
func (i *Informers) Start(ctx context.Context) {
	for _, inf := range i.all {
		i.running.Go(func() { inf.RunWithContext(ctx) })
	}
	go func() {
		<-ctx.Done()
		i.inheriting.ShutDown()
	}()
	i.running.Go(func() { i.runInheritance(ctx) })
}

// Wait returns once everything Start started has stopped (its context
// done): a stop that goes on before would see informers still running.
func (i *Informers) Wait() { i.running.Wait() }

// newInformer builds an informer of resource gr fed by the source made
// over its storage.
func newInformer(registry *planestorage.Registry, gr schema.GroupResource, k kind,
	sourceOf func(*planestorage.Store) *source) (cache.SharedIndexInformer, *source, error) {
	store := registry.Storage(gr)
	if store == nil {
		return nil, nil, fmt.Errorf("no storage for %s", gr)
	}
	src := sourceOf(store)
	inf := cache.NewSharedIndexInformer(src.listerWatcher(), k.object(), 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	return inf, src, nil
}

var daemonSetsResource = schema.GroupResource{Group: "apps", Resource: "daemonsets"}

// PlaneInformers are informers of one plane's objects, for a controller
// that cannot share the informers of every plane: upstream's DaemonSet
// controller lists all the nodes its informer holds and would run a
// DaemonSet's Pods on every plane's nodes.
type PlaneInformers struct {
	DaemonSets          appsinformers.DaemonSetInformer
	ControllerRevisions appsinformers.ControllerRevisionInformer
	Pods                coreinformers.PodInformer
	Nodes               coreinformers.NodeInformer

	all []cache.SharedIndexInformer
}

// ForPlane builds the informers of plane's DaemonSets and what their
// controller reads. Their objects carry the plane folded in, as those of
// the informers of every plane.
func ForPlane(registry *planestorage.Registry, plane string) (*PlaneInformers, error) {
	p := &PlaneInformers{}
	var err error
	build := func(gr schema.GroupResource, k kind) cache.SharedIndexInformer {
		if err != nil {
			return nil
		}
		var inf cache.SharedIndexInformer
		inf, _, err = newInformer(registry, gr, k, func(store *planestorage.Store) *source {
			s := newSource(store, k, nil, nil)
			s.plane = plane
			return s
		})
		p.all = append(p.all, inf)
		return inf
	}
	p.DaemonSets = daemonSetInformer{build(daemonSetsResource, daemonSets)}
	p.ControllerRevisions = controllerRevisionInformer{build(schema.GroupResource{Group: "apps", Resource: "controllerrevisions"}, controllerRevisions)}
	p.Pods = podInformer{build(schema.GroupResource{Resource: "pods"}, daemonPods)}
	p.Nodes = nodeInformer{build(schema.GroupResource{Resource: "nodes"}, nodes)}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Start runs the plane's informers until ctx is done.
func (p *PlaneInformers) Start(ctx context.Context) {
	for _, inf := range p.all {
		go inf.RunWithContext(ctx)
	}
}

// InheritanceChanged makes every informer look again at the objects plane
// inherits from a template: it was made from one, or is being deleted.
// It does not block.
func (i *Informers) InheritanceChanged(plane string) {
	if i.templates == nil {
		return
	}
	for _, stage := range i.stages {
		for _, is := range stage {
			is.source.awaits(plane)
		}
	}
	i.inheriting.Add(plane)
}

// WaitForSync waits for every informer's first list.
func (i *Informers) WaitForSync(ctx context.Context) bool {
	synced := make([]cache.InformerSynced, len(i.all))
	for n, inf := range i.all {
		synced[n] = inf.HasSynced
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

type deploymentInformer struct{ cache.SharedIndexInformer }

func (d deploymentInformer) Informer() cache.SharedIndexInformer { return d.SharedIndexInformer }
func (d deploymentInformer) Lister() appslisters.DeploymentLister {
	return appslisters.NewDeploymentLister(d.GetIndexer())
}

type replicaSetInformer struct{ cache.SharedIndexInformer }

func (r replicaSetInformer) Informer() cache.SharedIndexInformer { return r.SharedIndexInformer }
func (r replicaSetInformer) Lister() appslisters.ReplicaSetLister {
	return appslisters.NewReplicaSetLister(r.GetIndexer())
}

type replicationControllerInformer struct{ cache.SharedIndexInformer }

func (r replicationControllerInformer) Informer() cache.SharedIndexInformer {
	return r.SharedIndexInformer
}
func (r replicationControllerInformer) Lister() corelisters.ReplicationControllerLister {
	return corelisters.NewReplicationControllerLister(r.GetIndexer())
}

type statefulSetInformer struct{ cache.SharedIndexInformer }

func (s statefulSetInformer) Informer() cache.SharedIndexInformer { return s.SharedIndexInformer }
func (s statefulSetInformer) Lister() appslisters.StatefulSetLister {
	return appslisters.NewStatefulSetLister(s.GetIndexer())
}

type controllerRevisionInformer struct{ cache.SharedIndexInformer }

func (c controllerRevisionInformer) Informer() cache.SharedIndexInformer {
	return c.SharedIndexInformer
}
func (c controllerRevisionInformer) Lister() appslisters.ControllerRevisionLister {
	return appslisters.NewControllerRevisionLister(c.GetIndexer())
}

type persistentVolumeClaimInformer struct{ cache.SharedIndexInformer }

func (p persistentVolumeClaimInformer) Informer() cache.SharedIndexInformer {
	return p.SharedIndexInformer
}
func (p persistentVolumeClaimInformer) Lister() corelisters.PersistentVolumeClaimLister {
	return corelisters.NewPersistentVolumeClaimLister(p.GetIndexer())
}

type endpointsInformer struct{ cache.SharedIndexInformer }

func (e endpointsInformer) Informer() cache.SharedIndexInformer { return e.SharedIndexInformer }
func (e endpointsInformer) Lister() corelisters.EndpointsLister {
	return corelisters.NewEndpointsLister(e.GetIndexer())
}

type podDisruptionBudgetInformer struct{ cache.SharedIndexInformer }

func (p podDisruptionBudgetInformer) Informer() cache.SharedIndexInformer {
	return p.SharedIndexInformer
}
func (p podDisruptionBudgetInformer) Lister() policylisters.PodDisruptionBudgetLister {
	return policylisters.NewPodDisruptionBudgetLister(p.GetIndexer())
}

type jobInformer struct{ cache.SharedIndexInformer }

func (j jobInformer) Informer() cache.SharedIndexInformer { return j.SharedIndexInformer }
func (j jobInformer) Lister() batchlisters.JobLister {
	return batchlisters.NewJobLister(j.GetIndexer())
}

type cronJobInformer struct{ cache.SharedIndexInformer }

func (c cronJobInformer) Informer() cache.SharedIndexInformer { return c.SharedIndexInformer }
func (c cronJobInformer) Lister() batchlisters.CronJobLister {
	return batchlisters.NewCronJobLister(c.GetIndexer())
}

type podInformer struct{ cache.SharedIndexInformer }

func (p podInformer) Informer() cache.SharedIndexInformer { return p.SharedIndexInformer }
func (p podInformer) Lister() corelisters.PodLister       { return corelisters.NewPodLister(p.GetIndexer()) }

type serviceInformer struct{ cache.SharedIndexInformer }

func (s serviceInformer) Informer() cache.SharedIndexInformer { return s.SharedIndexInformer }
func (s serviceInformer) Lister() corelisters.ServiceLister {
	return corelisters.NewServiceLister(s.GetIndexer())
}

type nodeInformer struct{ cache.SharedIndexInformer }

func (n nodeInformer) Informer() cache.SharedIndexInformer { return n.SharedIndexInformer }
func (n nodeInformer) Lister() corelisters.NodeLister {
	return corelisters.NewNodeLister(n.GetIndexer())
}

type daemonSetInformer struct{ cache.SharedIndexInformer }

func (d daemonSetInformer) Informer() cache.SharedIndexInformer { return d.SharedIndexInformer }
func (d daemonSetInformer) Lister() appslisters.DaemonSetLister {
	return appslisters.NewDaemonSetLister(d.GetIndexer())
}

type endpointSliceInformer struct{ cache.SharedIndexInformer }

func (e endpointSliceInformer) Informer() cache.SharedIndexInformer { return e.SharedIndexInformer }
func (e endpointSliceInformer) Lister() discoverylisters.EndpointSliceLister {
	return discoverylisters.NewEndpointSliceLister(e.GetIndexer())
}
