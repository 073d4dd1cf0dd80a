package admission

import (
	"context"
	"fmt"
	"io"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	"kplane.dev/kplane/planes"
)

// CRDGroupsPluginName refuses CRDs that would define resources in a group
// the server serves itself.
const CRDGroupsPluginName = "kplane.dev/CustomResourceDefinitionGroups"

// CRDGroups refuses, in every plane, a CustomResourceDefinition whose group
// is served by the built-in API. Upstream lets such a CRD exist and the
// built-in handlers win at request time; here every plane shares the
// built-in storages and their caches, so a custom resource in a built-in
// group is refused before anything is stored. In the root plane the groups
// of kplane's own API are reserved the same way, except for kplane's own
// CRDs.
type CRDGroups struct {
	*admission.Handler
	builtin sets.Set[string]
	// rootOwn maps a group reserved in the root plane to the CRD names the
	// server itself installs in it.
	rootOwn map[string]sets.Set[string]
}

var _ admission.ValidationInterface = &CRDGroups{}

// NewCRDGroups returns the plugin. builtin are the groups of the built-in
// API; rootOwn the root plane's reserved groups with the CRDs allowed in
// them.
func NewCRDGroups(builtin sets.Set[string], rootOwn map[string]sets.Set[string]) *CRDGroups {
	return &CRDGroups{Handler: admission.NewHandler(admission.Create, admission.Update), builtin: builtin, rootOwn: rootOwn}
}

// Factory returns an admission.Factory that always yields p.
func (p *CRDGroups) Factory() admission.Factory {
	return func(io.Reader) (admission.Interface, error) { return p, nil }
}

// Validate refuses a CRD in a reserved group with 422 naming spec.group.
func (p *CRDGroups) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != apiextensionsv1.Resource("customresourcedefinitions") || a.GetSubresource() != "" {
		return nil
	}
	group, ok := crdGroup(a.GetObject())
	if !ok {
		return nil
	}
	plane, _ := planes.FromContext(ctx)
	var reason string
	switch {
	case p.builtin.Has(group):
		reason = fmt.Sprintf("group %q is served by the built-in API; a CustomResourceDefinition cannot define resources in it", group)
	case plane == planes.Root && p.rootOwn[group] != nil && !p.rootOwn[group].Has(a.GetName()):
		reason = fmt.Sprintf("group %q is kplane's own API in the root plane; a CustomResourceDefinition cannot define resources in it", group)
	default:
		return nil
	}
	return apierrors.NewInvalid(apiextensionsv1.Kind("CustomResourceDefinition"), a.GetName(),
		field.ErrorList{field.Forbidden(field.NewPath("spec", "group"), reason)})
}

func crdGroup(obj interface{}) (string, bool) {
	switch crd := obj.(type) {
	case *apiextensionsinternal.CustomResourceDefinition:
		return crd.Spec.Group, true
	case *apiextensionsv1.CustomResourceDefinition:
		return crd.Spec.Group, true
	}
	return "", false
}
