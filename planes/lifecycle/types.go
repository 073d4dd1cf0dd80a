package lifecycle

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"kplane.dev/kplane/planes/limits"
	"kplane.dev/kplane/planes/simulation/faults"
	"kplane.dev/kplane/planes/simulation/nodes"
)

// Plane is the kplane.dev/v1 Plane object of the root plane: one per
// plane, named by the plane id (manifests/crds/planes.kplane.dev.yaml).
type Plane struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PlaneSpec   `json:"spec"`
	Status            PlaneStatus `json:"status,omitempty"`
}

// PlaneSpec holds a Plane's settings: all but Simulation are fixed at
// creation.
type PlaneSpec struct {
	// Template is the plane this plane starts as. The plane stores only
	// what it changes; the template is read-only while planes use it.
	Template string `json:"template,omitempty"`
	// From is the plane this plane is a clone of: it starts as that
	// plane's state at its creation, over the same template.
	From string `json:"from,omitempty"`
	// Simulation shapes the plane's simulated cluster; nothing in the
	// plane can read or change it.
	Simulation *SimulationSpec `json:"simulation,omitempty"`
	// Audit says how the plane's requests are recorded in its trail.
	Audit *AuditSpec `json:"audit,omitempty"`
	// Limits is what the plane may use; what it leaves out takes the
	// server's defaults. It may change at any time.
	Limits *limits.Limits `json:"limits,omitempty"`
}

// AuditSpec is the audit level of a plane: None, Metadata, Request or
// RequestResponse (planes/audit); empty is the server's default.
type AuditSpec struct {
	Level string `json:"level,omitempty"`
}

// SimulationSpec is the part of a plane's simulated cluster set from root.
type SimulationSpec struct {
	// Faults the simulated kubelet plays for the containers they match.
	Faults []faults.Fault `json:"faults,omitempty"`
	// Nodes is the shape of the plane's simulated nodes, read when they
	// are made (the plane's first Pod).
	Nodes *nodes.Spec `json:"nodes,omitempty"`
	// RunDuration of the plane's run-to-completion pods.
	RunDuration *metav1.Duration `json:"runDuration,omitempty"`
	// ReadyDelay is how long the plane's pods run before they are Ready.
	ReadyDelay *metav1.Duration `json:"readyDelay,omitempty"`
}

// NodeSpec returns the node shape set for p, or nil.
func (p *Plane) NodeSpec() *nodes.Spec {
	if p.Spec.Simulation == nil {
		return nil
	}
	return p.Spec.Simulation.Nodes
}

// PlaneStatus is what the lifecycle reports.
type PlaneStatus struct {
	Phase          Phase        `json:"phase,omitempty"`
	ObjectCount    int64        `json:"objectCount,omitempty"`
	BootstrappedAt *metav1.Time `json:"bootstrappedAt,omitempty"`
	Message        string       `json:"message,omitempty"`
	// Usage is what the plane uses, against spec.limits.
	Usage *Usage `json:"usage,omitempty"`
}

// Usage is what a plane uses (written once a change holds still for a
// status interval, or every three intervals while it keeps changing).
type Usage struct {
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
	Watches int64 `json:"watches"`
}

// NewPlane returns the Plane of plane id, ready to create.
func NewPlane(id string) *Plane {
	return &Plane{
		TypeMeta:   metav1.TypeMeta{APIVersion: GVR.GroupVersion().String(), Kind: "Plane"},
		ObjectMeta: metav1.ObjectMeta{Name: id},
	}
}

// Unstructured is p for the dynamic client.
func (p *Plane) Unstructured() *unstructured.Unstructured {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		// A Plane is plain data: conversion cannot fail.
		panic(err)
	}
	return &unstructured.Unstructured{Object: content}
}

// PlaneFrom reads a Plane from the dynamic client's form.
func PlaneFrom(u *unstructured.Unstructured) (*Plane, error) {
	p := &Plane{}
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p)
	return p, err
}
