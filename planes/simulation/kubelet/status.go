package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// start writes pod as running on node: ready at once, or not ready until
// its ready delay has passed (pod is queued again for then).
func (k *Kubelet) start(ctx context.Context, key string, pod *corev1.Pod, node *corev1.Node) error {
	ip, err := k.ips.assign(pod, node)
	if err != nil {
		return err
	}
	now := metav1.Now()
	updated := pod.DeepCopy()
	s := &updated.Status
	s.Phase = corev1.PodRunning
	s.HostIP = hostIP(node)
	s.HostIPs = []corev1.HostIP{{IP: s.HostIP}}
	s.PodIP = ip
	s.PodIPs = []corev1.PodIP{{IP: ip}}
	s.StartTime = &now
	s.InitContainerStatuses = make([]corev1.ContainerStatus, 0, len(pod.Spec.InitContainers))
	for _, c := range pod.Spec.InitContainers {
		status := newContainerStatus(pod, c)
		status.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now, ContainerID: status.ContainerID,
		}}
		status.Ready = true
		s.InitContainerStatuses = append(s.InitContainerStatuses, status)
	}
	delay := k.readyDelay(pod)
	s.ContainerStatuses = make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		status := newContainerStatus(pod, c)
		status.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		started := true
		status.Started, status.Ready = &started, delay == 0
		s.ContainerStatuses = append(s.ContainerStatuses, status)
	}
	setReadiness(s)
	if err := k.writeStatus(ctx, updated); err != nil {
		return err
	}
	// The status keeps whole seconds: the delays count from this moment.
	if runsToCompletion(pod) || delay > 0 {
		k.ips.started(pod, now.Time)
	}
	if delay > 0 {
		k.wakeUp(key, updated, delay)
	}
	return nil
}

// complete writes a run-to-completion pod as succeeded.
func (k *Kubelet) complete(ctx context.Context, pod *corev1.Pod) error {
	now := metav1.Now()
	updated := pod.DeepCopy()
	s := &updated.Status
	s.Phase = corev1.PodSucceeded
	for i := range s.ContainerStatuses {
		c := &s.ContainerStatuses[i]
		started := now
		if c.State.Running != nil {
			started = c.State.Running.StartedAt
		}
		c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: started, FinishedAt: now, ContainerID: c.ContainerID,
		}}
		notStarted := false
		c.Ready, c.Started = false, &notStarted
	}
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		podutil.UpdatePodCondition(s, &corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: "PodCompleted"})
	}
	podutil.UpdatePodCondition(s, &corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse})
	return k.writeStatus(ctx, updated)
}

func (k *Kubelet) writeStatus(ctx context.Context, pod *corev1.Pod) error {
	_, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		// A conflict is retried from the informer's newer copy.
		return fmt.Errorf("writing the status of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

func newContainerStatus(pod *corev1.Pod, c corev1.Container) corev1.ContainerStatus {
	image := sha256.Sum256([]byte(c.Image))
	id := sha256.Sum256([]byte(string(pod.UID) + "/" + c.Name))
	return corev1.ContainerStatus{
		Name: c.Name, Image: c.Image, ImageID: "sha256:" + hex.EncodeToString(image[:]),
		ContainerID: ContainerIDPrefix + hex.EncodeToString(id[:16]),
	}
}

func hostIP(node *corev1.Node) string {
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
