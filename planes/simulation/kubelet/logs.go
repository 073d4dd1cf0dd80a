package kubelet

import (
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	api "k8s.io/kubernetes/pkg/apis/core"
)

const (
	// ContainerIDPrefix marks the containers the simulated kubelet started.
	ContainerIDPrefix = "kplane://"
	// LogAnnotationPrefix + a container's name, on a pod, is that
	// container's log (what `kubectl logs` prints) instead of the default
	// line.
	LogAnnotationPrefix = "logs.kplane.dev/"
)

// Log returns what `kubectl logs` shows of a container of pod: the pod's
// logs.kplane.dev/<container> annotation, or one line saying the
// container is simulated. simulated is false for a pod the simulated
// kubelet never started (no simulated log exists); err is the Kubernetes
// error a kubelet would answer with (no such container, not started, no
// previous container).
func Log(pod *api.Pod, opts *api.PodLogOptions) (text string, simulated bool, err error) {
	if opts == nil {
		opts = &api.PodLogOptions{}
	}
	name := opts.Container
	if name == "" {
		if len(pod.Spec.Containers) != 1 {
			names := make([]string, 0, len(pod.Spec.Containers))
			for _, c := range pod.Spec.Containers {
				names = append(names, c.Name)
			}
			return "", isSimulated(pod), apierrors.NewBadRequest(fmt.Sprintf(
				"a container name must be specified for pod %s, choose one of: %v", pod.Name, names))
		}
		name = pod.Spec.Containers[0].Name
	}
	status, found := containerStatus(pod, name)
	if !found {
		if !isSimulated(pod) {
			return "", false, nil
		}
		return "", true, apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
	}
	if !strings.HasPrefix(status.ContainerID, ContainerIDPrefix) {
		return "", false, nil
	}
	var started time.Time
	switch {
	case opts.Previous && status.LastTerminationState.Terminated != nil:
		// A restarted container (a crash-loop fault) wrote the same log
		// in its previous run.
		started = status.LastTerminationState.Terminated.StartedAt.Time
	case opts.Previous:
		return "", true, apierrors.NewBadRequest(fmt.Sprintf(
			"previous terminated container %q in pod %q not found", name, pod.Name))
	case status.State.Running != nil:
		started = status.State.Running.StartedAt.Time
	case status.State.Terminated != nil:
		started = status.State.Terminated.StartedAt.Time
	case status.State.Waiting != nil && status.LastTerminationState.Terminated != nil:
		// Waiting to restart: the last run's log, as a kubelet keeps it.
		started = status.LastTerminationState.Terminated.StartedAt.Time
	default:
		return "", true, apierrors.NewBadRequest(fmt.Sprintf(
			"container %q in pod %q is waiting to start: ContainerCreating", name, pod.Name))
	}
	text, scripted := pod.Annotations[LogAnnotationPrefix+name]
	if !scripted {
		text = fmt.Sprintf("kplane: container %s of pod %s/%s (image %s) is simulated: nothing runs, so it writes nothing else\n",
			name, pod.Namespace, pod.Name, status.Image)
	}
	return shape(text, started, opts), true, nil
}

func isSimulated(pod *api.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if strings.HasPrefix(s.ContainerID, ContainerIDPrefix) {
			return true
		}
	}
	return false
}

func containerStatus(pod *api.Pod, name string) (api.ContainerStatus, bool) {
	for _, list := range [][]api.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, s := range list {
			if s.Name == name {
				return s, true
			}
		}
	}
	return api.ContainerStatus{}, false
}

// shape applies timestamps, tailLines and limitBytes, as a kubelet would.
func shape(text string, started time.Time, opts *api.PodLogOptions) string {
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	lines := strings.SplitAfter(text, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if opts.TailLines != nil && int64(len(lines)) > *opts.TailLines {
		lines = lines[int64(len(lines))-*opts.TailLines:]
	}
	if opts.Timestamps {
		stamp := started.UTC().Format(time.RFC3339Nano) + " "
		for i := range lines {
			lines[i] = stamp + lines[i]
		}
	}
	out := strings.Join(lines, "")
	if opts.LimitBytes != nil && int64(len(out)) > *opts.LimitBytes {
		out = out[:*opts.LimitBytes]
	}
	return out
}
