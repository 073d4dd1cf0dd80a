package kplanetest

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Simulation shapes a plane's simulated cluster: the Plane's
// spec.simulation, set from the root plane where nothing in the plane can
// reach it. The server's defaults stand for what it leaves out. The types
// mirror the server's; the plane is created with strict field validation,
// so a field the server does not know is refused by name.
type Simulation struct {
	// Faults the simulated kubelet plays for the containers they match.
	Faults []Fault `json:"faults,omitempty"`
	// Nodes is the shape of the plane's simulated nodes, read when its
	// first Pod needs them.
	Nodes *Nodes `json:"nodes,omitempty"`
	// RunDuration of run-to-completion Pods (Jobs) before they succeed.
	RunDuration *metav1.Duration `json:"runDuration,omitempty"`
	// ReadyDelay is how long a Pod runs before its containers are ready.
	ReadyDelay *metav1.Duration `json:"readyDelay,omitempty"`
}

// FaultType is what goes wrong.
type FaultType string

const (
	// CrashLoopBackOff: the container exits non-zero a second after it
	// starts and is restarted with upstream's back-off.
	CrashLoopBackOff FaultType = "CrashLoopBackOff"
	// OOMKilled is CrashLoopBackOff with the OOM killer's reason and 137.
	OOMKilled FaultType = "OOMKilled"
	// ImagePullBackOff: the image cannot be pulled; the Pod stays Pending.
	ImagePullBackOff FaultType = "ImagePullBackOff"
	// NotReady: the container runs but never becomes ready.
	NotReady FaultType = "NotReady"
	// NodeNotReady: the nodes FaultMatch.Node names stop being Ready.
	NodeNotReady FaultType = "NodeNotReady"
)

// Fault is one failure and the containers it strikes.
type Fault struct {
	Type  FaultType  `json:"type"`
	Match FaultMatch `json:"match,omitempty"`
	// ExitCode of a crashing container (default 1; OOMKilled: 137).
	ExitCode int32 `json:"exitCode,omitempty"`
	// Message shown in the container's state.
	Message string `json:"message,omitempty"`
}

// FaultMatch selects containers; an empty field matches everything.
type FaultMatch struct {
	// Image is a glob over the container's image ("*:broken").
	Image     string            `json:"image,omitempty"`
	Container string            `json:"container,omitempty"`
	Namespace string            `json:"namespace,omitempty"`
	PodLabels map[string]string `json:"podLabels,omitempty"`
	// Node is a glob over node names, for NodeNotReady.
	Node string `json:"node,omitempty"`
}

// Nodes is the shape of every simulated node of the plane.
type Nodes struct {
	Count             *int32              `json:"count,omitempty"`
	CPU               *resource.Quantity  `json:"cpu,omitempty"`
	Memory            *resource.Quantity  `json:"memory,omitempty"`
	Pods              *resource.Quantity  `json:"pods,omitempty"`
	ExtendedResources corev1.ResourceList `json:"extendedResources,omitempty"`
	Labels            map[string]string   `json:"labels,omitempty"`
	Taints            []corev1.Taint      `json:"taints,omitempty"`
}

// WithSimulation creates the plane with its simulated cluster shaped by
// sim: faults its Pods meet from the first one, a node shape, timings. A
// server started with the simulation off ignores it.
func WithSimulation(sim Simulation) PlaneOption {
	return func(s *planeSettings) error { s.simulation = &sim; return nil }
}

// object is sim as the JSON values an unstructured object holds.
func (sim *Simulation) object() map[string]any {
	data, err := json.Marshal(sim)
	if err != nil {
		// Plain API types and strings: they always encode.
		panic(fmt.Sprintf("kplanetest: encoding a simulation: %v", err))
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		panic(fmt.Sprintf("kplanetest: decoding a simulation: %v", err))
	}
	return out
}

// SetSimulation replaces the plane's simulated cluster (nil: the server's
// defaults): a fault injected in the middle of a test strikes the Pods
// already running, as it would on a cluster.
func (p *PlaneHandle) SetSimulation(ctx context.Context, sim *Simulation) error {
	patchType, body := types.MergePatchType, any(map[string]any{"spec": map[string]any{"simulation": nil}})
	if sim != nil {
		// A JSON patch replaces it whole; a merge patch would keep what
		// sim leaves out.
		patchType, body = types.JSONPatchType, []map[string]any{{"op": "add", "path": "/spec/simulation", "value": sim}}
	}
	patch, err := json.Marshal(body)
	if err == nil {
		_, err = p.env.planes.Patch(ctx, p.ID, patchType, patch, metav1.PatchOptions{FieldValidation: metav1.FieldValidationStrict})
	}
	if err != nil {
		return fmt.Errorf("kplanetest: setting the simulation of plane %s: %w", p.ID, err)
	}
	return nil
}
