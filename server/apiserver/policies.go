package apiserver

import (
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/builder3"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"kplane.dev/kplane/planes/policies"
)

// bindPolicies gives the admission policy plugins what exists only once
// the APIs do: the kinds a plane serves (paramKind) and the structure of
// the built-in types (ApplyConfiguration mutations).
func (c CompletedConfig) bindPolicies(kinds policies.KindResolver) {
	c.policies.SetResolver(kinds)
	config := c.controlPlane.Generic.OpenAPIV3Config
	c.policies.Mutating.SetStaticTypeConverter(func() (managedfields.TypeConverter, error) {
		return builtinTypeConverter(config)
	})
}

// builtinTypeConverter is the type converter of every built-in kind, built
// from the server's OpenAPI definitions as upstream builds the one its
// handlers apply with.
func builtinTypeConverter(config *openapicommon.OpenAPIV3Config) (managedfields.TypeConverter, error) {
	if config == nil {
		return nil, fmt.Errorf("no OpenAPI v3 configuration")
	}
	// The definitions of what the server serves (narrowDefinitions):
	// BuildOpenAPIDefinitionsForResources reads those.
	defined := config.Definitions
	if defined == nil {
		defined = config.GetDefinitions(func(string) spec.Ref { return spec.Ref{} })
	}
	var names []string
	for gvk, t := range legacyscheme.Scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		obj, ok := reflect.New(t).Interface().(runtime.Object)
		if !ok {
			continue
		}
		name := util.GetCanonicalTypeName(obj)
		if _, ok := defined[name]; ok {
			names = append(names, name)
		}
	}
	definitions, err := builder3.BuildOpenAPIDefinitionsForResources(config, names...)
	if err != nil {
		return nil, fmt.Errorf("building OpenAPI definitions of the built-in types: %w", err)
	}
	return managedfields.NewTypeConverter(definitions, false)
}
