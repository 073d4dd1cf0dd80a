package kubelet

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/simulation/faults"
	"kplane.dev/kplane/planes/simulation/informers"
	"kplane.dev/kplane/planes/simulation/nodes"
	"kplane.dev/kplane/planes/simulation/planens"
)

func (k *Kubelet) nodeChanged(obj any) {
	if node, ok := obj.(*corev1.Node); ok && node.Labels[nodes.SimulatedLabel] == "true" {
		k.nodeQueue.Add(node.Name)
	}
}

// syncNode makes a simulated node Ready, or not Ready with the not-ready
// taints while a NodeNotReady fault strikes it, and has its pods looked at
// again when that changes.
func (k *Kubelet) syncNode(ctx context.Context, name string) error {
	obj, exists, err := k.nodes.GetIndexer().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	node := obj.(*corev1.Node)
	plane, local, ok := planens.Split(node.Name)
	if !ok || node.Labels[nodes.SimulatedLabel] != "true" {
		return nil
	}
	fault := faults.ForNode(k.settings(plane).Faults, local)
	updated := node.DeepCopy()
	nodes.SetReady(updated, fault)
	if apiequality.Semantic.DeepEqual(node.Spec.Taints, updated.Spec.Taints) &&
		apiequality.Semantic.DeepEqual(node.Status.Conditions, updated.Status.Conditions) {
		return nil
	}
	updated.Name = local
	ctx = planes.WithPlane(ctx, plane)
	written, err := k.routed.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return ignoreGone(err, "tainting node", node.Name)
	}
	written.Status.Conditions = updated.Status.Conditions
	if _, err := k.routed.CoreV1().Nodes().UpdateStatus(ctx, written, metav1.UpdateOptions{}); err != nil {
		return ignoreGone(err, "writing the status of node", node.Name)
	}
	return nil
}

// nodeUpdated has a node's pods looked at again when its readiness
// changed. It runs once the informer holds the new node, so the pods'
// syncs read it (after the write, the informer may not have it yet).
func (k *Kubelet) nodeUpdated(old, cur any) {
	before, ok1 := old.(*corev1.Node)
	after, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 || nodeReady(before) == nodeReady(after) {
		return
	}
	pods, _ := k.pods.GetIndexer().ByIndex(informers.NodeIndex, after.Name)
	for _, p := range pods {
		if key, err := cache.MetaNamespaceKeyFunc(p); err == nil {
			k.queue.Add(key)
		}
	}
}

// nodeReady reports whether node's Ready condition is True.
func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeDown writes a running pod of a node that is not Ready as not ready.
func (k *Kubelet) nodeDown(ctx context.Context, pod *corev1.Pod, node *corev1.Node) error {
	if pod.Status.Phase != corev1.PodRunning {
		return nil
	}
	updated := pod.DeepCopy()
	for i := range updated.Status.ContainerStatuses {
		updated.Status.ContainerStatuses[i].Ready = false
	}
	setReadiness(&updated.Status)
	if apiequality.Semantic.DeepEqual(pod.Status, updated.Status) {
		return nil
	}
	return k.writeStatus(ctx, updated)
}

func ignoreGone(err error, what, name string) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("%s %s: %w", what, name, err)
}
