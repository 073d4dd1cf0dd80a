package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kplane.dev/kplane/examples/rayserve-operator/api/v1alpha1"
)

// ServerSpec is the model server's container.
type ServerSpec struct {
	// Image runs the model server.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`

	// Port the server listens on; the Service exposes it.
	// +kubebuilder:default=8000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// RayServeSpec is v1alpha1's spec with the image and port under server.
type RayServeSpec struct {
	// Server is the model server's container.
	Server ServerSpec `json:"server"`

	// Replicas of the server.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

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

// RayServe is a model server managed by the operator.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rs
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.server.image`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
type RayServe struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RayServeSpec `json:"spec,omitempty"`
	// Status is v1alpha1's: the versions differ in their spec only.
	Status v1alpha1.RayServeStatus `json:"status,omitempty"`
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
