package manifests

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed crds/*.yaml
var crdFiles embed.FS

// CRDs returns the CustomResourceDefinitions kplane installs in the root
// plane, in file order.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(crdFiles, "crds/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, name := range names {
		data, err := crdFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, crd)
		byName[crd.Name] = crd
	}
	if err := shareMemberSchemas(byName); err != nil {
		return nil, err
	}
	return out, nil
}

// memberFields are the Plane spec fields a Fleet sets on its members.
var memberFields = []string{"simulation", "limits", "audit"}

// shareMemberSchemas gives the Fleet's spec fields that it hands its
// members the schemas of the Plane's: the Fleet validates exactly what a
// Plane takes, and the two cannot drift apart. The Fleet keeps its own
// descriptions.
func shareMemberSchemas(crds map[string]*apiextensionsv1.CustomResourceDefinition) error {
	planeSpec, err := specProperties(crds["planes.kplane.dev"])
	if err != nil {
		return err
	}
	fleetSpec, err := specProperties(crds["fleets.kplane.dev"])
	if err != nil {
		return err
	}
	for _, field := range memberFields {
		from, ok := planeSpec[field]
		if !ok {
			return fmt.Errorf("the Plane CRD has no spec.%s", field)
		}
		to, ok := fleetSpec[field]
		if !ok {
			return fmt.Errorf("the Fleet CRD has no spec.%s", field)
		}
		shared := *from.DeepCopy()
		shared.Description = to.Description
		fleetSpec[field] = shared
	}
	return nil
}

// specProperties returns the properties of spec in the schema of crd's
// only version (the map itself: writing to it changes crd).
func specProperties(crd *apiextensionsv1.CustomResourceDefinition) (map[string]apiextensionsv1.JSONSchemaProps, error) {
	if crd == nil || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil ||
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("the Plane and Fleet CRDs must have one version with a schema each")
	}
	spec, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	if !ok || spec.Properties == nil {
		return nil, fmt.Errorf("%s has no spec properties in its schema", crd.Name)
	}
	return spec.Properties, nil
}
