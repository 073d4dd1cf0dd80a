package kubelet

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"kplane.dev/kplane/planes/simulation/faults"
	"kplane.dev/kplane/planes/simulation/planens"
)

// Upstream kubelet's container restart back-off, and how long a crashing
// container runs before it exits.
const (
	crashBackOffInitial = 10 * time.Second
	crashBackOffMax     = 5 * time.Minute
	crashAfter          = time.Second
)

// fault returns the fault striking pod (a folded pod), if any.
func (k *Kubelet) fault(pod *corev1.Pod) (*faults.Fault, int) {
	plane, namespace, ok := planens.Split(pod.Namespace)
	if !ok {
		return nil, -1
	}
	list := k.settings(plane).Faults
	if len(list) == 0 {
		return nil, -1
	}
	return faults.For(list, namespace, pod)
}

// settings returns what plane's Plane sets.
func (k *Kubelet) settings(plane string) PlaneSettings {
	if k.config.Planes == nil || plane == "" {
		return PlaneSettings{}
	}
	return k.config.Planes(plane)
}

// play writes the state fault f gives pod's container ci, and queues the
// pod again when that state changes with time (a crash, a restart).
func (k *Kubelet) play(ctx context.Context, key string, pod *corev1.Pod, node *corev1.Node, f *faults.Fault, ci int) error {
	updated, err := k.running(pod, node)
	if err != nil {
		return err
	}
	s := &updated.Status
	now := metav1.Now()
	for i := range s.ContainerStatuses {
		if i != ci || !f.Crashes() {
			restart(&s.ContainerStatuses[i], now)
		}
	}
	c := &s.ContainerStatuses[ci]
	switch {
	case f.Type == faults.ImagePullBackOff:
		s.Phase = corev1.PodPending
		message := f.Message
		if message == "" {
			message = fmt.Sprintf("Back-off pulling image %q: ErrImagePull: failed to pull and unpack image %q: not found", c.Image, c.Image)
		}
		c.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: message}}
		c.Ready, c.Started = false, ptrTo(false)
	case f.Type == faults.NotReady:
		c.Ready = false
	case f.Crashes():
		if next := crash(updated, ci, f, now); next > 0 {
			k.queue.AddAfter(key, next)
		}
		c = &s.ContainerStatuses[ci]
	}
	setReadiness(s)
	if apiequality.Semantic.DeepEqual(pod.Status, updated.Status) {
		return nil
	}
	return k.writeStatus(ctx, updated)
}

// running returns pod's status as start writes it: the state every
// container has when nothing goes wrong, keeping what pod already shows
// of a container that runs or has restarted.
func (k *Kubelet) running(pod *corev1.Pod, node *corev1.Node) (*corev1.Pod, error) {
	ip, err := k.ips.assign(pod, node)
	if err != nil {
		return nil, err
	}
	updated := pod.DeepCopy()
	s := &updated.Status
	if s.StartTime == nil {
		now := metav1.Now()
		s.StartTime = &now
	}
	s.Phase = corev1.PodRunning
	s.HostIP = hostIP(node)
	s.HostIPs = []corev1.HostIP{{IP: s.HostIP}}
	s.PodIP, s.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	statuses := make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		status := newContainerStatus(pod, c)
		if old, ok := containerStatusOf(pod.Status.ContainerStatuses, c.Name); ok && old.Image == c.Image {
			status.RestartCount, status.LastTerminationState = old.RestartCount, old.LastTerminationState
			if old.State.Running != nil || old.State.Waiting != nil {
				status.State = old.State
			}
		}
		if status.State.Running == nil && status.State.Waiting == nil {
			status.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
		}
		status.Started, status.Ready = ptrTo(true), true
		statuses = append(statuses, status)
	}
	s.ContainerStatuses = statuses
	return updated, nil
}

// restart runs a container that waits (after a fault that is gone).
func restart(c *corev1.ContainerStatus, now metav1.Time) {
	if c.State.Waiting != nil {
		c.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	}
	c.Started, c.Ready = ptrTo(true), true
}

// recover writes a pod that showed a fault's marks as running well: the
// fault was lifted.
func (k *Kubelet) recover(ctx context.Context, pod *corev1.Pod, node *corev1.Node) error {
	updated, err := k.running(pod, node)
	if err != nil {
		return err
	}
	now := metav1.Now()
	for i := range updated.Status.ContainerStatuses {
		restart(&updated.Status.ContainerStatuses[i], now)
	}
	setReadiness(&updated.Status)
	return k.writeStatus(ctx, updated)
}

// crash moves container ci of a crashing pod one step on: running a
// second, exiting, backing off, running again. It returns when the next
// step is due (0: none, the pod has failed).
func crash(pod *corev1.Pod, ci int, f *faults.Fault, now metav1.Time) time.Duration {
	s := &pod.Status
	c := &s.ContainerStatuses[ci]
	c.Ready = false
	switch {
	case c.State.Waiting != nil:
		due := c.LastTerminationState.Terminated.FinishedAt.Add(backOff(c.RestartCount))
		if left := due.Sub(now.Time); left > 0 {
			return left
		}
		c.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		c.Started = ptrTo(true)
		return crashAfter
	case c.State.Running != nil:
		if left := c.State.Running.StartedAt.Add(crashAfter).Sub(now.Time); left > 0 {
			return left
		}
	}
	code, reason := f.ExitStatus()
	var started metav1.Time
	if c.State.Running != nil {
		started = c.State.Running.StartedAt
	}
	exited := &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: f.Message,
		StartedAt: started, FinishedAt: now, ContainerID: c.ContainerID}
	c.Started = ptrTo(false)
	if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
		c.State = corev1.ContainerState{Terminated: exited}
		s.Phase = corev1.PodFailed
		return 0
	}
	c.RestartCount++
	c.LastTerminationState = corev1.ContainerState{Terminated: exited}
	wait := backOff(c.RestartCount)
	c.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: fmt.Sprintf(
		"back-off %s restarting failed container=%s pod=%s_%s(%s)", wait, c.Name, pod.Name, planens.Strip(pod.Namespace), pod.UID)}}
	return wait
}

// backOff is the wait before restart n of a container, as upstream's.
func backOff(restarts int32) time.Duration {
	wait := crashBackOffInitial
	for i := int32(1); i < restarts && wait < crashBackOffMax; i++ {
		wait *= 2
	}
	return min(wait, crashBackOffMax)
}

// setReadiness sets the pod's conditions from its containers.
func setReadiness(s *corev1.PodStatus) {
	ready := corev1.ConditionTrue
	for _, c := range s.ContainerStatuses {
		if !c.Ready {
			ready = corev1.ConditionFalse
		}
	}
	if s.Phase == corev1.PodFailed || s.Phase == corev1.PodSucceeded {
		ready = corev1.ConditionFalse
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodScheduled} {
		podutil.UpdatePodCondition(s, &corev1.PodCondition{Type: t, Status: corev1.ConditionTrue})
	}
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		condition := corev1.PodCondition{Type: t, Status: ready}
		if ready == corev1.ConditionFalse {
			condition.Reason = "ContainersNotReady"
		}
		podutil.UpdatePodCondition(s, &condition)
	}
}

// faulted reports whether a running pod shows a fault's marks: a
// container that is not running or not ready.
func faulted(pod *corev1.Pod) bool {
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Running == nil || !c.Ready {
			return true
		}
	}
	return false
}

func containerStatusOf(list []corev1.ContainerStatus, name string) (corev1.ContainerStatus, bool) {
	for _, s := range list {
		if s.Name == name {
			return s, true
		}
	}
	return corev1.ContainerStatus{}, false
}

func ptrTo[T any](v T) *T { return &v }
