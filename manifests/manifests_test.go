package manifests

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// A Fleet's spec.simulation validates what a Plane's does: the Fleet
// copies it into its members' Planes.
func TestFleetSimulationIsThePlanes(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	simulation := map[string]apiextensionsv1.JSONSchemaProps{}
	for _, crd := range crds {
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		simulation[crd.Name] = spec.Properties["simulation"]
	}
	plane, fleet := simulation["planes.kplane.dev"], simulation["fleets.kplane.dev"]
	if len(plane.Properties) == 0 {
		t.Fatal("the Plane CRD has no spec.simulation properties")
	}
	if fleet.Description == "" || fleet.Description == plane.Description {
		t.Errorf("the Fleet's spec.simulation should keep its own description, has %q", fleet.Description)
	}
	plane.Description, fleet.Description = "", ""
	if !equality.Semantic.DeepEqual(plane, fleet) {
		t.Errorf("the Fleet's spec.simulation differs from the Plane's:\nfleet %+v\nplane %+v", fleet, plane)
	}
}
