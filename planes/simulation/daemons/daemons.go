package daemons

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubernetes/pkg/controller/daemon"

	"kplane.dev/kplane/planes/simulation/informers"
	"kplane.dev/kplane/planes/simulation/planens"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/planes/workers"
)

// Config is what the DaemonSet controllers work with.
type Config struct {
	// Client is the controllers' clientset (the plane folded into the
	// namespace, see planeclient).
	Client kubernetes.Interface
	// Storage holds the storages the planes' informers read.
	Storage *planestorage.Registry
	// DaemonSets is the informer of every plane's DaemonSets: it tells
	// which planes have any.
	DaemonSets cache.SharedIndexInformer
	// Nodes makes a plane's simulated nodes: a DaemonSet's Pods go to
	// nodes, not the other way round, so its plane needs them first.
	Nodes func(ctx context.Context, plane string) error
}

// Daemons starts and stops the planes' DaemonSet controllers.
type Daemons struct {
	config Config
	queue  workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	running map[string]context.CancelFunc
}

// New returns the controllers' keeper; Run starts it.
func New(config Config) (*Daemons, error) {
	if err := informers.AddPlaneIndex(config.DaemonSets); err != nil {
		return nil, fmt.Errorf("daemonset index: %w", err)
	}
	d := &Daemons{
		config:  config,
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "kplane_simulation_daemonsets"}),
		running: map[string]context.CancelFunc{},
	}
	enqueue := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			if plane := planens.Plane(key); plane != "" {
				d.queue.Add(plane)
			}
		}
	}
	if _, err := config.DaemonSets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	return d, nil
}

// Run keeps a controller running for each plane with DaemonSets until ctx
// is done.
func (d *Daemons) Run(ctx context.Context) {
	defer d.stopAll()
	workers.Run(ctx, d.queue, 1, "daemonsets plane", d.sync)
}

// sync starts plane's controller when it has DaemonSets, stops it when it
// has none left.
func (d *Daemons) sync(ctx context.Context, plane string) error {
	objs, err := d.config.DaemonSets.GetIndexer().ByIndex(informers.PlaneIndex, plane)
	if err != nil {
		return err
	}
	d.mu.Lock()
	stop, running := d.running[plane]
	d.mu.Unlock()
	switch {
	case len(objs) == 0 && running:
		stop()
		d.mu.Lock()
		delete(d.running, plane)
		d.mu.Unlock()
	case len(objs) > 0 && !running:
		return d.start(ctx, plane)
	}
	return nil
}

// start runs upstream's DaemonSet controller over plane's own informers.
func (d *Daemons) start(ctx context.Context, plane string) error {
	if err := d.config.Nodes(ctx, plane); err != nil {
		return fmt.Errorf("nodes of plane %s: %w", plane, err)
	}
	inf, err := informers.ForPlane(d.config.Storage, plane)
	if err != nil {
		return err
	}
	planeCtx, cancel := context.WithCancel(ctx)
	controller, err := daemon.NewDaemonSetsController(planeCtx, inf.DaemonSets, inf.ControllerRevisions, inf.Pods, inf.Nodes,
		d.config.Client, flowcontrol.NewBackOff(failedPodsBackoff, failedPodsBackoffMax))
	if err != nil {
		cancel()
		return fmt.Errorf("daemonset controller of plane %s: %w", plane, err)
	}
	inf.Start(planeCtx)
	go controller.Run(planeCtx, 1)
	d.mu.Lock()
	d.running[plane] = cancel
	d.mu.Unlock()
	logrus.WithField("plane", plane).Debug("daemonset controller started")
	return nil
}

// kube-controller-manager's back-off of a DaemonSet's failed Pods.
const (
	failedPodsBackoff    = time.Second
	failedPodsBackoffMax = 15 * time.Minute
)

func (d *Daemons) stopAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for plane, stop := range d.running {
		stop()
		delete(d.running, plane)
	}
}
