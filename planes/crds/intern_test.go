package crds

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func loadCRD(t *testing.T) *apiextensionsinternal.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile("../../test/e2e/testdata/rayservices-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v1 := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, v1); err != nil {
		t.Fatal(err)
	}
	internal := &apiextensionsinternal.CustomResourceDefinition{}
	if err := apiextensionsapiserver.Scheme.Convert(v1, internal, nil); err != nil {
		t.Fatal(err)
	}
	return internal
}

func TestInternSharesIdenticalSchemas(t *testing.T) {
	s := NewSchemas()
	a, b := loadCRD(t), loadCRD(t)
	if _, err := json.Marshal(a.Spec.Versions[0].Schema.OpenAPIV3Schema); err != nil {
		t.Fatalf("schemas must be hashable: %v", err)
	}
	s.Intern(a)
	s.Intern(b)
	if a.Spec.Versions[0].Schema.OpenAPIV3Schema != b.Spec.Versions[0].Schema.OpenAPIV3Schema {
		t.Fatal("identical schemas are not shared")
	}
	c := loadCRD(t)
	c.Spec.Versions[0].Schema.OpenAPIV3Schema.Required = []string{"other"}
	s.Intern(c)
	if c.Spec.Versions[0].Schema.OpenAPIV3Schema == a.Spec.Versions[0].Schema.OpenAPIV3Schema {
		t.Fatal("different schemas must not be shared")
	}
}

func TestInternSharesManagedFields(t *testing.T) {
	s := NewSchemas()
	raw := []byte(`{"f:spec":{` + strings.Repeat(`"f:x":{},`, 100) + `"f:y":{}}}`)
	a, b := loadCRD(t), loadCRD(t)
	a.ManagedFields = []metav1.ManagedFieldsEntry{{FieldsV1: &metav1.FieldsV1{Raw: append([]byte(nil), raw...)}}}
	b.ManagedFields = []metav1.ManagedFieldsEntry{{FieldsV1: &metav1.FieldsV1{Raw: append([]byte(nil), raw...)}}}
	s.Intern(a)
	s.Intern(b)
	if &a.ManagedFields[0].FieldsV1.Raw[0] != &b.ManagedFields[0].FieldsV1.Raw[0] {
		t.Fatal("identical managed fields are not shared")
	}
	if string(b.ManagedFields[0].FieldsV1.Raw) != string(raw) {
		t.Fatal("interning changed the managed fields")
	}
}
