package apiserver

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Profile is the API surface every plane of the server serves.
type Profile string

const (
	// ProfileFull serves kube-apiserver's API: the generic control plane and
	// the container-orchestration APIs (pods, nodes, workloads, services,
	// storage, networking), with the workload simulation if it is on.
	ProfileFull Profile = "full"
	// ProfileGeneric serves the generic control plane of KEP-4080: the API
	// machinery without anything that needs nodes or workloads. No
	// simulation runs.
	ProfileGeneric Profile = "generic"
)

// ParseProfile reads --profile; empty is full.
func ParseProfile(s string) (Profile, error) {
	switch Profile(s) {
	case "", ProfileFull:
		return ProfileFull, nil
	case ProfileGeneric:
		return ProfileGeneric, nil
	}
	return "", fmt.Errorf("--profile %q: want full or generic", s)
}

// Generic tells whether p leaves out the workload APIs.
func (p Profile) Generic() bool { return p == ProfileGeneric }

// genericCoreResources are the core ("/api/v1") resources of the generic
// profile: those of upstream's generic core registry (configmaps, events,
// namespaces, resourcequotas, secrets, serviceaccounts) and limitranges,
// which kplane's LimitRanger admission reads. Everything else in the core
// group describes workloads, nodes or the network.
var genericCoreResources = []string{
	"configmaps", "events", "limitranges", "namespaces", "resourcequotas", "secrets", "serviceaccounts",
}

// workloadCoreResources are the core resources only the full profile
// serves.
var workloadCoreResources = []string{
	"bindings", "componentstatuses", "endpoints", "nodes", "persistentvolumeclaims", "persistentvolumes",
	"pods", "podtemplates", "replicationcontrollers", "services",
}

// genericGroups are the API groups of the generic profile besides core:
// upstream's GenericStorageProviders, apiextensions.k8s.io (CRDs, served by
// planes/crds) and apiregistration.k8s.io (APIServices, which KEP-4080
// keeps).
var genericGroups = map[string]bool{
	"apiextensions.k8s.io":         true,
	"apiregistration.k8s.io":       true,
	"admissionregistration.k8s.io": true,
	"authentication.k8s.io":        true,
	"authorization.k8s.io":         true,
	"certificates.k8s.io":          true,
	"coordination.k8s.io":          true,
	"events.k8s.io":                true,
	"flowcontrol.apiserver.k8s.io": true,
	"internal.apiserver.k8s.io":    true,
	"rbac.authorization.k8s.io":    true,
}

// servesGroup tells whether p serves a built-in group (core included).
func (p Profile) servesGroup(group string) bool {
	return !p.Generic() || group == corev1.GroupName || genericGroups[group]
}

// coreDisabled are the core resources p leaves out.
func (p Profile) coreDisabled() []schema.GroupVersionResource {
	if !p.Generic() {
		return nil
	}
	out := make([]schema.GroupVersionResource, 0, len(workloadCoreResources))
	for _, r := range workloadCoreResources {
		out = append(out, corev1.SchemeGroupVersion.WithResource(r))
	}
	return out
}
