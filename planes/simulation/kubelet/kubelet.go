package kubelet

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"kplane.dev/kplane/planes/simulation/faults"
	"kplane.dev/kplane/planes/simulation/informers"
	"kplane.dev/kplane/planes/simulation/nodes"
	"kplane.dev/kplane/planes/simulation/planens"
	"kplane.dev/kplane/planes/workers"
)

// RunDurationAnnotation on a pod sets how long its containers run before
// a run-to-completion pod succeeds (a Go duration, e.g. "30s").
const RunDurationAnnotation = "kplane.dev/run-duration"

// ReadyDelayAnnotation on a pod sets how long its containers run before
// they are ready (a Go duration, e.g. "2s"): the time a readiness probe
// would take to pass, which the simulation does not run.
const ReadyDelayAnnotation = "kplane.dev/ready-delay"

// Config is how the simulated kubelet behaves.
type Config struct {
	// RunDuration is how long a run-to-completion pod runs.
	RunDuration time.Duration
	// ReadyDelay is how long a pod runs before its containers are ready
	// (0: at once).
	ReadyDelay time.Duration
	Workers    int
	// Planes returns what a plane's Plane sets for its simulation (nil:
	// nothing anywhere).
	Planes func(plane string) PlaneSettings
}

// PlaneSettings is what a plane's Plane (in root) sets for the kubelet.
type PlaneSettings struct {
	Faults []faults.Fault
	// RunDuration of the plane's run-to-completion pods (0: the server's).
	RunDuration time.Duration
	// ReadyDelay of the plane's pods (0: the server's).
	ReadyDelay time.Duration
}

// Kubelet runs the pods of the simulated nodes.
type Kubelet struct {
	config Config
	client kubernetes.Interface
	// routed writes nodes, by their name inside the plane of each call's
	// context (the folding client cannot unfold a name in a body).
	routed kubernetes.Interface
	pods   cache.SharedIndexInformer
	nodes  cache.SharedIndexInformer
	queue  workqueue.TypedRateLimitingInterface[string]
	// nodeQueue holds the simulated nodes whose readiness to check.
	nodeQueue workqueue.TypedRateLimitingInterface[string]
	ips       *addresses
}

// New returns a kubelet over the shared informers; client is the
// plane-folding client (planeclient), routed the client addressing the
// plane of each call's context.
func New(config Config, client, routed kubernetes.Interface, inf *informers.Informers) (*Kubelet, error) {
	if config.Workers <= 0 {
		config.Workers = 16
	}
	k := &Kubelet{
		config: config, client: client, routed: routed, pods: inf.Pods.Informer(), nodes: inf.Nodes.Informer(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kplane_simulation_kubelet"}),
		nodeQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kplane_simulation_kubelet_nodes"}),
	}
	if err := informers.AddPlaneIndex(k.nodes); err != nil {
		return nil, fmt.Errorf("kubelet index: %w", err)
	}
	// A node is looked at when it is made: a plane's faults may be set
	// before its first pod.
	if _, err := k.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: k.nodeChanged, UpdateFunc: k.nodeUpdated,
	}); err != nil {
		return nil, err
	}
	if err := informers.AddPlaneIndex(k.pods); err != nil {
		return nil, fmt.Errorf("kubelet index: %w", err)
	}
	if err := informers.AddNodeIndex(k.pods); err != nil {
		return nil, fmt.Errorf("kubelet index: %w", err)
	}
	k.ips = newAddresses(k.pods)
	if _, err := k.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    k.podChanged,
		UpdateFunc: func(_, obj any) { k.podChanged(obj) },
		DeleteFunc: k.podDeleted,
	}); err != nil {
		return nil, err
	}
	return k, nil
}

// Run works until ctx is done.
func (k *Kubelet) Run(ctx context.Context) {
	go workers.Run(ctx, k.nodeQueue, 2, "node", k.syncNode)
	workers.Run(ctx, k.queue, k.config.Workers, "pod", k.sync)
}

func (k *Kubelet) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	k.ips.observed(pod)
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "" ||
		(pod.Status.Phase == corev1.PodRunning && (runsToCompletion(pod) || faulted(pod) || k.struck(pod))) {
		key, _ := cache.MetaNamespaceKeyFunc(pod)
		k.queue.Add(key)
	}
}

// struck reports whether a fault strikes pod.
func (k *Kubelet) struck(pod *corev1.Pod) bool {
	f, _ := k.fault(pod)
	return f != nil
}

// PlaneChanged makes the kubelet look again at every pod of plane: its
// settings (faults) were changed.
func (k *Kubelet) PlaneChanged(plane string) {
	objs, _ := k.pods.GetIndexer().ByIndex(informers.PlaneIndex, plane)
	for _, obj := range objs {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	planeNodes, _ := k.nodes.GetIndexer().ByIndex(informers.PlaneIndex, plane)
	for _, obj := range planeNodes {
		k.nodeChanged(obj)
	}
}

func (k *Kubelet) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		k.ips.released(pod)
	}
}

// simulated returns the simulated node pod runs on, or nil.
func (k *Kubelet) simulated(pod *corev1.Pod) *corev1.Node {
	obj, exists, err := k.nodes.GetIndexer().GetByKey(pod.Spec.NodeName)
	if err != nil || !exists {
		return nil
	}
	node := obj.(*corev1.Node)
	if node.Labels[nodes.SimulatedLabel] != "true" {
		return nil
	}
	return node
}

func (k *Kubelet) sync(ctx context.Context, key string) error {
	obj, exists, err := k.pods.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pod := obj.(*corev1.Pod)
	node := k.simulated(pod)
	if node == nil {
		return nil
	}
	if pod.DeletionTimestamp != nil {
		return k.remove(ctx, pod)
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	if !nodeReady(node) {
		return k.nodeDown(ctx, pod, node)
	}
	if f, ci := k.fault(pod); f != nil {
		return k.play(ctx, key, pod, node, f, ci)
	}
	switch {
	case pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "":
		return k.start(ctx, key, pod, node)
	case pod.Status.Phase != corev1.PodRunning:
		return nil
	case runsToCompletion(pod) && k.runLeft(pod) <= 0:
		// A pod that runs to completion may end before it was ever ready.
		return k.complete(ctx, pod)
	case faulted(pod):
		// Not ready yet (its ready delay), or a fault was lifted.
		if left := k.readyLeft(pod); left > 0 {
			k.wakeUp(key, pod, left)
			return nil
		}
		return k.recover(ctx, pod, node)
	case runsToCompletion(pod):
		k.queue.AddAfter(key, k.runLeft(pod))
	}
	return nil
}

// wakeUp queues pod again when its readiness is due in left, or sooner
// when it runs to completion before that.
func (k *Kubelet) wakeUp(key string, pod *corev1.Pod, left time.Duration) {
	if runsToCompletion(pod) {
		left = min(left, k.runLeft(pod))
	}
	k.queue.AddAfter(key, left)
}

// runLeft is how long a run-to-completion pod still runs.
func (k *Kubelet) runLeft(pod *corev1.Pod) time.Duration {
	return k.runDuration(pod) - time.Since(k.startTime(pod))
}

// readyLeft is how long a running pod's containers still wait to be ready.
func (k *Kubelet) readyLeft(pod *corev1.Pod) time.Duration {
	return k.readyDelay(pod) - time.Since(k.startTime(pod))
}

// remove ends a graceful deletion: the containers are gone at once.
func (k *Kubelet) remove(ctx context.Context, pod *corev1.Pod) error {
	zero := int64(0)
	err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func (k *Kubelet) runDuration(pod *corev1.Pod) time.Duration {
	return firstDuration(pod.Annotations[RunDurationAnnotation], k.settings(planens.Plane(pod.Namespace)).RunDuration, k.config.RunDuration)
}

func (k *Kubelet) readyDelay(pod *corev1.Pod) time.Duration {
	return firstDuration(pod.Annotations[ReadyDelayAnnotation], k.settings(planens.Plane(pod.Namespace)).ReadyDelay, k.config.ReadyDelay)
}

// firstDuration is the pod's own setting (an annotation; one that does not
// parse as a duration of at least 0 is ignored), else its plane's (0: not
// set), else the server's.
func firstDuration(annotation string, plane, server time.Duration) time.Duration {
	if d, err := time.ParseDuration(annotation); err == nil && d >= 0 {
		return d
	}
	if plane > 0 {
		return plane
	}
	return server
}

func runsToCompletion(pod *corev1.Pod) bool {
	return pod.Spec.RestartPolicy == corev1.RestartPolicyNever || pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure
}

func (k *Kubelet) startTime(pod *corev1.Pod) time.Time {
	if t, ok := k.ips.startedAt(pod); ok {
		return t
	}
	if pod.Status.StartTime != nil {
		return pod.Status.StartTime.Time
	}
	return time.Now()
}
