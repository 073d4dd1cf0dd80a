package resourcequota

import (
	corev1 "k8s.io/api/core/v1"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/quota/v1/evaluator/core"
	"k8s.io/utils/clock"
)

// counted reports whether a pod still counts against quota (upstream's
// QuotaV1Pod): one that stopped counting is what upstream's update filter
// recalculates for.
func counted(pod *api.Pod) bool {
	out := &corev1.Pod{}
	out.Status.Phase = corev1.PodPhase(pod.Status.Phase)
	out.DeletionTimestamp = pod.DeletionTimestamp
	out.DeletionGracePeriodSeconds = pod.DeletionGracePeriodSeconds
	return core.QuotaV1Pod(out, clock.RealClock{})
}
