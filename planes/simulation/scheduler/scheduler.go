package scheduler

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"kplane.dev/kplane/planes/simulation/informers"
	"kplane.dev/kplane/planes/simulation/nodes"
	"kplane.dev/kplane/planes/simulation/planens"
	"kplane.dev/kplane/planes/workers"
)

// Name is the schedulerName this scheduler serves (and pods without one).
const Name = corev1.DefaultSchedulerName

// Scheduler binds pods to nodes.
type Scheduler struct {
	client    kubernetes.Interface
	pods      cache.SharedIndexInformer
	nodes     cache.SharedIndexInformer
	provision *nodes.Provisioner
	queue     workqueue.TypedRateLimitingInterface[string]
	broadcast record.EventBroadcaster
	recorder  record.EventRecorder
	assumedMu sync.Mutex
	assumed   map[string]assumption
	// planeLocks serialise the decisions of one plane (a hash of the
	// plane picks the lock) while workers bind pods of different planes
	// at the same time.
	planeLocks [64]sync.Mutex
}

// Workers bind pods of different planes concurrently: each bind is a write
// to wait for, and one worker would queue every plane behind it.
const Workers = 16

// assumption is a binding the informer has not shown yet.
type assumption struct {
	node string
	pod  *corev1.Pod
}

// New returns a scheduler over the shared informers; client is the
// plane-folding client (planeclient), provision makes a plane's nodes.
func New(client kubernetes.Interface, inf *informers.Informers, provision *nodes.Provisioner) (*Scheduler, error) {
	s := &Scheduler{
		client: client, pods: inf.Pods.Informer(), nodes: inf.Nodes.Informer(), provision: provision,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kplane_simulation_scheduler"}),
		broadcast: record.NewBroadcaster(),
		assumed:   map[string]assumption{},
	}
	s.recorder = s.broadcast.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Name})
	for _, err := range []error{
		informers.AddPlaneIndex(s.pods), informers.AddNodeIndex(s.pods), informers.AddPlaneIndex(s.nodes),
	} {
		if err != nil {
			return nil, fmt.Errorf("scheduler indexes: %w", err)
		}
	}
	if _, err := s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.podChanged(obj) },
		UpdateFunc: func(_, obj any) { s.podChanged(obj) },
		DeleteFunc: s.podDeleted,
	}); err != nil {
		return nil, err
	}
	if _, err := s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.nodeChanged,
		UpdateFunc: func(_, obj any) { s.nodeChanged(obj) },
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// Run schedules until ctx is done.
func (s *Scheduler) Run(ctx context.Context) {
	s.broadcast.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.CoreV1().Events("")})
	defer s.broadcast.Shutdown()
	workers.Run(ctx, s.queue, Workers, "pod", s.schedule)
}

// wantsScheduling reports whether the pod waits for this scheduler.
func wantsScheduling(pod *corev1.Pod) bool {
	return pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil &&
		(pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == Name) &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

func (s *Scheduler) podChanged(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(pod)
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		s.forget(key)
	}
	if wantsScheduling(pod) {
		s.queue.Add(key)
		return
	}
	if terminal(pod) {
		s.retryPlane(planens.Plane(pod.Namespace))
	}
}

func (s *Scheduler) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(pod)
	s.forget(key)
	if pod.Spec.NodeName != "" {
		s.retryPlane(planens.Plane(pod.Namespace))
	}
}

func (s *Scheduler) nodeChanged(obj any) {
	if node, ok := obj.(*corev1.Node); ok {
		s.retryPlane(planens.Plane(node.Name))
	}
}

// retryPlane queues the plane's pods that wait for a node.
func (s *Scheduler) retryPlane(plane string) {
	if plane == "" {
		return
	}
	objs, _ := s.pods.GetIndexer().ByIndex(informers.PlaneIndex, plane)
	for _, obj := range objs {
		if pod := obj.(*corev1.Pod); wantsScheduling(pod) {
			key, _ := cache.MetaNamespaceKeyFunc(pod)
			s.queue.Add(key)
		}
	}
}

func (s *Scheduler) forget(key string) {
	s.assumedMu.Lock()
	delete(s.assumed, key)
	s.assumedMu.Unlock()
}

func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

func (s *Scheduler) schedule(ctx context.Context, key string) error {
	obj, exists, err := s.pods.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pod := obj.(*corev1.Pod)
	if !wantsScheduling(pod) {
		return nil
	}
	s.assumedMu.Lock()
	_, pending := s.assumed[key]
	s.assumedMu.Unlock()
	if pending {
		return nil
	}
	plane := planens.Plane(pod.Namespace)
	if known, _ := s.nodes.GetIndexer().ByIndex(informers.PlaneIndex, plane); len(known) == 0 {
		// The nodes' arrival queues the plane's pods again; a concurrent
		// call for the same plane returns at once, freeing its worker.
		return s.provision.Ensure(ctx, plane)
	}
	lock := &s.planeLocks[planeHash(plane)%uint32(len(s.planeLocks))]
	lock.Lock()
	defer lock.Unlock()
	planeNodes, _ := s.nodes.GetIndexer().ByIndex(informers.PlaneIndex, plane)
	node, why := s.pick(pod, planeNodes)
	if node == nil {
		return s.unschedulable(ctx, pod, fmt.Sprintf("0/%d nodes are available: %s.", len(planeNodes), why))
	}
	return s.bind(ctx, key, pod, node)
}

func (s *Scheduler) bind(ctx context.Context, key string, pod *corev1.Pod, node *corev1.Node) error {
	s.assumedMu.Lock()
	s.assumed[key] = assumption{node: node.Name, pod: pod}
	s.assumedMu.Unlock()
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: planens.Strip(node.Name)},
	}
	if err := s.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		s.forget(key)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// Deleted, or bound by someone else: the informer tells.
			return nil
		}
		return fmt.Errorf("binding %s to %s: %w", key, node.Name, err)
	}
	s.recorder.Eventf(pod, corev1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s",
		planens.Strip(pod.Namespace), pod.Name, planens.Strip(node.Name))
	return nil
}

// unschedulable records why pod fits nowhere, once per message.
func (s *Scheduler) unschedulable(ctx context.Context, pod *corev1.Pod, message string) error {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message == message {
			return nil
		}
	}
	s.recorder.Event(pod, corev1.EventTypeWarning, "FailedScheduling", message)
	updated := pod.DeepCopy()
	podutil.UpdatePodCondition(&updated.Status, &corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message,
	})
	_, err := s.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

func planeHash(plane string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(plane))
	return h.Sum32()
}

// sortedNodes orders nodes by name so that ties are decided the same way.
func sortedNodes(objs []any) []*corev1.Node {
	out := make([]*corev1.Node, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.(*corev1.Node))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
