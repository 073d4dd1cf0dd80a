package apiserver

import (
	resourcev1 "k8s.io/api/resource/v1"
	resourcev1alpha3 "k8s.io/api/resource/v1alpha3"
	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/kubernetes/pkg/controlplane"
)

// notServed are the API groups kube-apiserver serves that a plane does not
// (see storageProviders). Disabling them also keeps upstream components from
// starting informers for them.
var notServed = []schema.GroupVersion{
	resourcev1.SchemeGroupVersion, resourcev1beta1.SchemeGroupVersion,
	resourcev1beta2.SchemeGroupVersion, resourcev1alpha3.SchemeGroupVersion,
}

// resourceConfig is kube-apiserver's default API surface minus notServed:
// the versions kube-apiserver enables by default and no others
// (flowcontrol.apiserver.k8s.io/v1, storagemigration.k8s.io/v1, not their
// betas). The generic profile also leaves out every group it does not
// serve and the workload resources of the core group, so that neither
// discovery, nor OpenAPI, nor any upstream component sees them.
func resourceConfig(profile Profile) *serverstorage.ResourceConfig {
	c := controlplane.DefaultAPIResourceConfigSource()
	c.DisableVersions(notServed...)
	for gv := range c.GroupVersionConfigs {
		if !profile.servesGroup(gv.Group) {
			c.DisableVersions(gv)
		}
	}
	c.DisableResources(profile.coreDisabled()...)
	return c
}
