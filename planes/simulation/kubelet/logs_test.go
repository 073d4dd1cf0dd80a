package kubelet

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/utils/ptr"
)

func simulatedPod() *api.Pod {
	return &api.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default",
			Annotations: map[string]string{LogAnnotationPrefix + "main": "one\ntwo\nthree"}},
		Spec: api.PodSpec{Containers: []api.Container{{Name: "main"}, {Name: "side"}}},
		Status: api.PodStatus{ContainerStatuses: []api.ContainerStatus{
			{Name: "main", Image: "app:1", ContainerID: ContainerIDPrefix + "a", State: api.ContainerState{Running: &api.ContainerStateRunning{}}},
			{Name: "side", Image: "proxy:2", ContainerID: ContainerIDPrefix + "b", State: api.ContainerState{Waiting: &api.ContainerStateWaiting{}}},
		}},
	}
}

func TestLog(t *testing.T) {
	pod := simulatedPod()
	text, simulated, err := Log(pod, &api.PodLogOptions{Container: "main", TailLines: ptr.To[int64](2)})
	if err != nil || !simulated || text != "two\nthree\n" {
		t.Fatalf("tail 2: %q %v %v", text, simulated, err)
	}
	if _, _, err := Log(pod, &api.PodLogOptions{}); !apierrors.IsBadRequest(err) {
		t.Errorf("two containers, none named: %v", err)
	}
	if _, _, err := Log(pod, &api.PodLogOptions{Container: "side"}); !apierrors.IsBadRequest(err) {
		t.Errorf("waiting container: %v", err)
	}
	if _, _, err := Log(pod, &api.PodLogOptions{Container: "main", Previous: true}); !apierrors.IsBadRequest(err) {
		t.Errorf("previous: %v", err)
	}
	if text, _, _ := Log(pod, &api.PodLogOptions{Container: "main", LimitBytes: ptr.To[int64](3)}); text != "one" {
		t.Errorf("limitBytes 3: %q", text)
	}
	pod.Status.ContainerStatuses[0].ContainerID = "containerd://x"
	if _, simulated, _ := Log(pod, &api.PodLogOptions{Container: "main"}); simulated {
		t.Error("a container the simulation did not start has no simulated log")
	}
}
