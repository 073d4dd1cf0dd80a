package kubelet

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"kplane.dev/kplane/planes/simulation/informers"
)

// addresses hands out pod IPs from each node's pod CIDR. The pods on a
// node (pod informer, node index) say what is taken, so nothing is kept
// per plane and a restart needs no state; only assignments the informer
// has not shown yet are remembered, and the start times of running
// run-to-completion pods (their status keeps whole seconds only).
type addresses struct {
	pods cache.SharedIndexInformer

	mu      sync.Mutex
	pending map[string]string // pod key -> IP written, not yet seen
	starts  map[string]time.Time
}

func newAddresses(pods cache.SharedIndexInformer) *addresses {
	return &addresses{pods: pods, pending: map[string]string{}, starts: map[string]time.Time{}}
}

func podKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

// assign returns pod's IP: the one it has, or the lowest free one of node.
func (a *addresses) assign(pod *corev1.Pod, node *corev1.Node) (string, error) {
	if pod.Status.PodIP != "" {
		return pod.Status.PodIP, nil
	}
	cidr, err := netip.ParsePrefix(node.Spec.PodCIDR)
	if err != nil {
		return "", fmt.Errorf("node %s has no pod CIDR: %w", node.Name, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ip, ok := a.pending[podKey(pod)]; ok {
		return ip, nil
	}
	taken := map[string]bool{}
	objs, _ := a.pods.GetIndexer().ByIndex(informers.NodeIndex, pod.Spec.NodeName)
	for _, obj := range objs {
		if p := obj.(*corev1.Pod); p.Status.PodIP != "" && p.UID != pod.UID {
			taken[p.Status.PodIP] = true
		}
	}
	for _, ip := range a.pending {
		taken[ip] = true
	}
	for ip := cidr.Addr().Next(); cidr.Contains(ip); ip = ip.Next() {
		if !taken[ip.String()] && ip.As4()[3] != 255 {
			a.pending[podKey(pod)] = ip.String()
			return ip.String(), nil
		}
	}
	return "", fmt.Errorf("the pod CIDR %s of node %s is full", cidr, node.Name)
}

// observed drops an assignment once the informer shows it.
func (a *addresses) observed(pod *corev1.Pod) {
	if pod.Status.PodIP == "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return
	}
	a.mu.Lock()
	delete(a.pending, podKey(pod))
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		delete(a.starts, podKey(pod))
	}
	a.mu.Unlock()
}

func (a *addresses) released(pod *corev1.Pod) {
	a.mu.Lock()
	delete(a.pending, podKey(pod))
	delete(a.starts, podKey(pod))
	a.mu.Unlock()
}

func (a *addresses) started(pod *corev1.Pod, at time.Time) {
	a.mu.Lock()
	a.starts[podKey(pod)] = at
	a.mu.Unlock()
}

// startedAt is when pod was started by this process, if it was.
func (a *addresses) startedAt(pod *corev1.Pod) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.starts[podKey(pod)]
	return t, ok
}
