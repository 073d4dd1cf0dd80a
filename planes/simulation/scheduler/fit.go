package scheduler

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"kplane.dev/kplane/planes/simulation/informers"
	"kplane.dev/kplane/planes/simulation/planens"
)

// pick returns the node pod goes to, or nil and why none fits (upstream's
// "N node(s) ..." summary).
func (s *Scheduler) pick(pod *corev1.Pod, objs []any) (*corev1.Node, string) {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	reasons := map[string]int{}
	var best *corev1.Node
	bestPods := 0
	for _, node := range sortedNodes(objs) {
		why, podsThere := s.fits(pod, requests, affinity, node)
		if why != "" {
			reasons[why]++
			continue
		}
		if best == nil || podsThere < bestPods {
			best, bestPods = node, podsThere
		}
	}
	if best != nil {
		return best, ""
	}
	summary := make([]string, 0, len(reasons))
	for why, n := range reasons {
		summary = append(summary, fmt.Sprintf("%d %s", n, why))
	}
	sort.Strings(summary)
	return nil, strings.Join(summary, ", ")
}

// fits returns why pod does not fit node ("" if it does) and how many pods
// the node runs.
func (s *Scheduler) fits(pod *corev1.Pod, requests corev1.ResourceList, affinity nodeaffinity.RequiredNodeAffinity, node *corev1.Node) (string, int) {
	if !ready(node) {
		return "node(s) were not ready", 0
	}
	if node.Spec.Unschedulable {
		return "node(s) were unschedulable", 0
	}
	if taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false); untolerated {
		return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", taint.Key, taint.Value), 0
	}
	// Match sees the node's name as the plane knows it (matchFields).
	unfolded := *node
	unfolded.Name = planens.Strip(node.Name)
	if ok, _ := affinity.Match(&unfolded); !ok {
		return "node(s) didn't match Pod's node affinity/selector", 0
	}
	used, count := s.usage(node.Name)
	if pods, ok := node.Status.Allocatable[corev1.ResourcePods]; ok && int64(count+1) > pods.Value() {
		return "Too many pods", count
	}
	names := make([]string, 0, len(requests))
	for name := range requests {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		want := requests[corev1.ResourceName(name)]
		if want.IsZero() {
			continue
		}
		free := node.Status.Allocatable[corev1.ResourceName(name)]
		total := used[corev1.ResourceName(name)]
		total.Add(want)
		if total.Cmp(free) > 0 {
			return "Insufficient " + name, count
		}
	}
	return "", count
}

// usage sums the requests of the pods on node (folded name), including
// bindings the informer has not shown yet.
func (s *Scheduler) usage(node string) (corev1.ResourceList, int) {
	used := corev1.ResourceList{}
	count := 0
	add := func(pod *corev1.Pod) {
		count++
		for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			sum := used[name]
			sum.Add(q)
			used[name] = sum
		}
	}
	seen := map[string]bool{}
	objs, _ := s.pods.GetIndexer().ByIndex(informers.NodeIndex, node)
	for _, obj := range objs {
		pod := obj.(*corev1.Pod)
		if terminal(pod) {
			continue
		}
		seen[pod.Namespace+"/"+pod.Name] = true
		add(pod)
	}
	s.assumedMu.Lock()
	for key, a := range s.assumed {
		if a.node == node && !seen[key] {
			add(a.pod)
		}
	}
	s.assumedMu.Unlock()
	return used, count
}

func ready(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
