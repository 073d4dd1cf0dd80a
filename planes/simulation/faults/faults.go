// Package faults describes the failures the simulated kubelet plays for a
// plane's containers: set from outside the plane (its Plane object in
// root, spec.simulation.faults), matched by what a pod holds (image,
// container, namespace, labels), so that an agent in the plane cures a
// fault the way it would on a cluster: by fixing the spec.
package faults

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Type is what goes wrong.
type Type string

const (
	// CrashLoopBackOff: the container exits non-zero a second after it
	// starts and is restarted with upstream's back-off (10 s doubling to
	// 5 min); a pod that is never restarted fails.
	CrashLoopBackOff Type = "CrashLoopBackOff"
	// OOMKilled is CrashLoopBackOff with the OOM killer's reason and 137.
	OOMKilled Type = "OOMKilled"
	// ImagePullBackOff: the image cannot be pulled; the pod stays Pending.
	ImagePullBackOff Type = "ImagePullBackOff"
	// NotReady: the container runs but never passes readiness.
	NotReady Type = "NotReady"
	// NodeNotReady: the nodes matched by Match.Node stop being Ready and
	// get the not-ready taints; their pods are not ready.
	NodeNotReady Type = "NodeNotReady"
)

// Types are the known fault types.
var Types = []Type{CrashLoopBackOff, OOMKilled, ImagePullBackOff, NotReady, NodeNotReady}

// Fault is one failure and the containers it strikes.
type Fault struct {
	Type  Type  `json:"type"`
	Match Match `json:"match,omitempty"`
	// ExitCode of a crashing container (default 1; OOMKilled: 137).
	ExitCode int32 `json:"exitCode,omitempty"`
	// Message shown in the container's state.
	Message string `json:"message,omitempty"`
}

// Match selects containers; an empty field matches everything.
type Match struct {
	// Image is a glob over the container's image: * matches any run of
	// characters, slashes included; ? matches one.
	Image     string `json:"image,omitempty"`
	Container string `json:"container,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	// PodLabels must all be on the pod.
	PodLabels map[string]string `json:"podLabels,omitempty"`
	// Node is a glob over node names, for NodeNotReady.
	Node string `json:"node,omitempty"`
}

// Matches reports whether the fault strikes container c of a pod in
// namespace with podLabels.
func (f Fault) Matches(namespace string, podLabels map[string]string, c corev1.Container) bool {
	if f.Type == NodeNotReady {
		return false
	}
	m := f.Match
	if m.Namespace != "" && m.Namespace != namespace || m.Container != "" && m.Container != c.Name {
		return false
	}
	if m.Image != "" && !glob(m.Image, c.Image) {
		return false
	}
	return labels.SelectorFromSet(m.PodLabels).Matches(labels.Set(podLabels))
}

// ExitStatus is the exit code and reason of a crashing container.
func (f Fault) ExitStatus() (int32, string) {
	switch {
	case f.Type == OOMKilled && f.ExitCode == 0:
		return 137, "OOMKilled"
	case f.Type == OOMKilled:
		return f.ExitCode, "OOMKilled"
	case f.ExitCode == 0:
		return 1, "Error"
	}
	return f.ExitCode, "Error"
}

// Crashes reports whether the fault makes a container exit.
func (f Fault) Crashes() bool { return f.Type == CrashLoopBackOff || f.Type == OOMKilled }

// ForNode returns the first NodeNotReady fault of list that strikes the
// node named node (its name inside the plane), or nil.
func ForNode(list []Fault, node string) *Fault {
	for i := range list {
		if list[i].Type == NodeNotReady && (list[i].Match.Node == "" || glob(list[i].Match.Node, node)) {
			return &list[i]
		}
	}
	return nil
}

// For returns the first fault of list that strikes one of pod's
// containers, and that container's index; nil when none does. namespace
// is the pod's namespace inside its plane.
func For(list []Fault, namespace string, pod *corev1.Pod) (*Fault, int) {
	for i := range list {
		for ci, c := range pod.Spec.Containers {
			if list[i].Matches(namespace, pod.Labels, c) {
				return &list[i], ci
			}
		}
	}
	return nil, -1
}

// glob reports whether s matches pattern (* any run, ? one character).
func glob(pattern, s string) bool {
	// The classic two-pointer match: on a mismatch, let the last * take
	// one more character.
	p, i, star, mark := 0, 0, -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p, i = p+1, i+1
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
