// Package v1beta1 is the serving.example.com/v1beta1 API: RayServe with
// the server's image and port grouped under spec.server. v1alpha1 is the
// stored version (the hub); a conversion webhook converts between them.
// +kubebuilder:object:generate=true
// +groupName=serving.example.com
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API's group and version.
	GroupVersion = schema.GroupVersion{Group: "serving.example.com", Version: "v1beta1"}

	// SchemeBuilder registers the API's types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
