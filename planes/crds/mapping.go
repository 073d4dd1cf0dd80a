package crds

import (
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CustomResource is how a plane serves one custom resource.
type CustomResource struct {
	// Resource is at the version clients of the plane see first.
	Resource   schema.GroupVersionResource
	Kind       string
	Namespaced bool
	// Singular and ShortNames also name it (kubectl, snapshot filters).
	Singular   string
	ShortNames []string
}

// ForKind finds plane's established custom resource of group/kind gk.
func (s *Server) ForKind(plane string, gk schema.GroupKind) (CustomResource, bool) {
	return s.find(plane, func(crd *apiextensionsv1.CustomResourceDefinition) bool {
		return crd.Spec.Group == gk.Group && crd.Status.AcceptedNames.Kind == gk.Kind
	})
}

// ForResource finds plane's established custom resource gr.
func (s *Server) ForResource(plane string, gr schema.GroupResource) (CustomResource, bool) {
	return s.find(plane, func(crd *apiextensionsv1.CustomResourceDefinition) bool {
		return crd.Spec.Group == gr.Group && crd.Status.AcceptedNames.Plural == gr.Resource
	})
}

// CustomResources returns plane's established custom resources.
func (s *Server) CustomResources(plane string) []CustomResource {
	var out []CustomResource
	entries, _ := s.index.List(plane)
	for _, e := range entries {
		if cr, ok := s.find(plane, func(crd *apiextensionsv1.CustomResourceDefinition) bool { return crd == e.crd }); ok {
			out = append(out, cr)
		}
	}
	return out
}

func (s *Server) find(plane string, match func(*apiextensionsv1.CustomResourceDefinition) bool) (CustomResource, bool) {
	entries, _ := s.index.List(plane)
	for _, e := range entries {
		crd := e.crd
		if !match(crd) || !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
			continue
		}
		versions := servedVersions(crd)
		if len(versions) == 0 {
			return CustomResource{}, false
		}
		return CustomResource{
			Resource:   schema.GroupVersionResource{Group: crd.Spec.Group, Version: versions[0], Resource: crd.Status.AcceptedNames.Plural},
			Kind:       crd.Status.AcceptedNames.Kind,
			Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
			Singular:   crd.Status.AcceptedNames.Singular,
			ShortNames: crd.Status.AcceptedNames.ShortNames,
		}, true
	}
	return CustomResource{}, false
}
