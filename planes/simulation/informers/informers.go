package informers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/wait"

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
			return newSource(store, k, off, templates).withOwnRecordsKnown(registry.MayHoldOwn)
		})
		if err != nil {
			return nil
		}
		i.all = append(i.all, inf)
		built[inf] = src
		return inf
	}
	i.Deployments = typedInformer(build(groupResource("apps", "deployments"), deployments), appslisters.NewDeploymentLister)
	i.ReplicaSets = typedInformer(build(groupResource("apps", "replicasets"), replicaSets), appslisters.NewReplicaSetLister)
	i.ReplicationControllers = typedInformer(build(groupResource("", "replicationcontrollers"), replicationControllers), corelisters.NewReplicationControllerLister)
	i.StatefulSets = typedInformer(build(groupResource("apps", "statefulsets"), statefulSets), appslisters.NewStatefulSetLister)
	i.ControllerRevisions = typedInformer(build(groupResource("apps", "controllerrevisions"), controllerRevisions), appslisters.NewControllerRevisionLister)
	i.PersistentVolumeClaims = typedInformer(build(groupResource("", "persistentvolumeclaims"), persistentVolumeClaims), corelisters.NewPersistentVolumeClaimLister)
	i.Endpoints = typedInformer(build(groupResource("", "endpoints"), endpoints), corelisters.NewEndpointsLister)
	i.PodDisruptionBudgets = typedInformer(build(groupResource("policy", "poddisruptionbudgets"), podDisruptionBudgets), policylisters.NewPodDisruptionBudgetLister)
	i.Jobs = typedInformer(build(groupResource("batch", "jobs"), jobs), batchlisters.NewJobLister)
	i.CronJobs = typedInformer(build(groupResource("batch", "cronjobs"), cronJobs), batchlisters.NewCronJobLister)
	i.Pods = typedInformer(build(groupResource("", "pods"), pods), corelisters.NewPodLister)
	i.Services = typedInformer(build(groupResource("", "services"), services), corelisters.NewServiceLister)
	i.Nodes = typedInformer(build(groupResource("", "nodes"), nodes), corelisters.NewNodeLister)
	i.EndpointSlices = typedInformer(build(groupResource("discovery.k8s.io", "endpointslices"), endpointSlices), discoverylisters.NewEndpointSliceLister)
	i.DaemonSets = typedInformer(build(daemonSetsResource, daemonSets), appslisters.NewDaemonSetLister)
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

var daemonSetsResource = groupResource("apps", "daemonsets")

func groupResource(group, resource string) schema.GroupResource {
	return schema.GroupResource{Group: group, Resource: resource}
}

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
	p.DaemonSets = typedInformer(build(daemonSetsResource, daemonSets), appslisters.NewDaemonSetLister)
	p.ControllerRevisions = typedInformer(build(groupResource("apps", "controllerrevisions"), controllerRevisions), appslisters.NewControllerRevisionLister)
	p.Pods = typedInformer(build(groupResource("", "pods"), daemonPods), corelisters.NewPodLister)
	p.Nodes = typedInformer(build(groupResource("", "nodes"), nodes), corelisters.NewNodeLister)
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

// settleTimeout bounds the wait for the informers to be handed a reset's
// deletions; past it the reset lets the plane's requests in regardless.
const settleTimeout = 10 * time.Second

// AwaitRevisions returns once every informer over a storage of upTo has
// been handed that storage's events up to its revision: the controllers
// read the plane as the watch caches show it from then on. The informer
// stores an event a moment after it is handed over, which nothing tells;
// that moment is left to chance.
func (i *Informers) AwaitRevisions(ctx context.Context, upTo map[*planestorage.Store]int64) {
	settle, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	for _, stage := range i.stages {
		for _, is := range stage {
			revision, ok := upTo[is.source.store]
			if !ok || revision <= 0 || !is.informer.HasSynced() {
				continue
			}
			err := wait.PollUntilContextCancel(settle, time.Millisecond, true, func(context.Context) (bool, error) {
				return is.source.through.Load() >= uint64(revision), nil
			})
			if err != nil && ctx.Err() == nil {
				logrus.WithError(err).Warnf("simulation: the %s informer was not handed revision %d within %s",
					is.source.store.Resource(), revision, settleTimeout)
			}
		}
	}
}

// WaitForSync waits for every informer's first list.
func (i *Informers) WaitForSync(ctx context.Context) bool {
	synced := make([]cache.InformerSynced, len(i.all))
	for n, inf := range i.all {
		synced[n] = inf.HasSynced
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// typed is a shared informer seen as client-go's typed informer of one
// resource (the interfaces upstream's controllers take): its Lister reads
// the informer's index.
type typed[L any] struct {
	cache.SharedIndexInformer
	newLister func(cache.Indexer) L
}

// typedInformer makes inf a typed informer whose lister newLister builds.
func typedInformer[L any](inf cache.SharedIndexInformer, newLister func(cache.Indexer) L) typed[L] {
	return typed[L]{SharedIndexInformer: inf, newLister: newLister}
}

func (t typed[L]) Informer() cache.SharedIndexInformer { return t.SharedIndexInformer }
func (t typed[L]) Lister() L                           { return t.newLister(t.GetIndexer()) }
