package manifests

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// A Fleet's spec.simulation, limits and audit validate what a Plane's
// do: the Fleet copies them into its members' Planes.
func TestFleetMemberFieldsAreThePlanes(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	spec := map[string]apiextensionsv1.JSONSchemaProps{}
	for _, crd := range crds {
		spec[crd.Name] = crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	}
	for _, field := range []string{"simulation", "limits", "audit"} {
		plane, fleet := spec["planes.kplane.dev"].Properties[field], spec["fleets.kplane.dev"].Properties[field]
		if len(plane.Properties) == 0 {
			t.Fatalf("the Plane CRD has no spec.%s properties", field)
		}
		if fleet.Description == "" || fleet.Description == plane.Description {
			t.Errorf("the Fleet's spec.%s should keep its own description, has %q", field, fleet.Description)
		}
		plane.Description, fleet.Description = "", ""
		if !equality.Semantic.DeepEqual(plane, fleet) {
			t.Errorf("the Fleet's spec.%s differs from the Plane's:\nfleet %+v\nplane %+v", field, fleet, plane)
		}
	}
}
