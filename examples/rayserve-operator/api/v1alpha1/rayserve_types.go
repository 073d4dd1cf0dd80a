package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RayServeSpec is a model server: an image serving on a port, its serve
// configuration, and how many replicas run it.
type RayServeSpec struct {
	// Image runs the model server.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`

	// Replicas of the server.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Port the server listens on; the Service exposes it.
	// +kubebuilder:default=8000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// ServeConfig is the serve configuration, written into the
	// RayServe's ConfigMap; a change rolls the Deployment.
	// +optional
	ServeConfig map[string]string `json:"serveConfig,omitempty"`

	// ServiceType of the Service.
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +kubebuilder:default=ClusterIP
	// +optional
	ServiceType corev1.ServiceType `json:"serviceType,omitempty"`

	// Suspend scales the server to zero and keeps everything else.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// Condition types of a RayServe.
const (
	// ConditionReconciled: the Deployment, Service and ConfigMap match
	// the spec.
	ConditionReconciled = "Reconciled"
	// ConditionAvailable: every desired replica is available.
	ConditionAvailable = "Available"
)

// RayServeStatus is what the controller observed.
type RayServeStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// AvailableReplicas of the Deployment.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// ServiceName is the Service that exposes the server.
	// +optional
	ServiceName string `json:"serviceName,omitempty"`
	// ConfigHash identifies the serve configuration the Deployment runs.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`
	// Conditions: Reconciled and Available.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RayServe is a model server managed by the operator: a Deployment, a
// Service and a ConfigMap.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rs
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
type RayServe struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RayServeSpec   `json:"spec,omitempty"`
	Status RayServeStatus `json:"status,omitempty"`
}

// RayServeList is a list of RayServes.
// +kubebuilder:object:root=true
type RayServeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RayServe `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RayServe{}, &RayServeList{})
}
