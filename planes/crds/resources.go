package crds

import (
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Resource is a custom resource one plane serves, at the version a client
// of the plane sees first in discovery.
type Resource struct {
	schema.GroupVersionResource
	Kind       string
	Singular   string
	ShortNames []string
	Namespaced bool
}

// Resources returns the custom resources plane serves: one per established
// CRD, sorted by CRD name. The same CRDs make up the plane's discovery.
func (s *Server) Resources(plane string) []Resource {
	entries, _ := s.index.List(plane)
	out := make([]Resource, 0, len(entries))
	for _, e := range entries {
		crd := e.crd
		if !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
			continue
		}
		versions := servedVersions(crd)
		if len(versions) == 0 {
			continue
		}
		names := crd.Status.AcceptedNames
		out = append(out, Resource{
			GroupVersionResource: schema.GroupVersionResource{Group: crd.Spec.Group, Version: versions[0], Resource: names.Plural},
			Kind:                 names.Kind,
			Singular:             names.Singular,
			ShortNames:           names.ShortNames,
			Namespaced:           crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		})
	}
	return out
}
