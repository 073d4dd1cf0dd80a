package apiserver

import (
	"slices"
	"testing"

	restful "github.com/emicklei/go-restful/v3"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
)

type (
	servedKind   struct{}
	servedList   struct{}
	servedSpec   struct{}
	requestBody  struct{}
	errorStatus  struct{}
	unservedKind struct{}
	unservedSpec struct{}
)

// TestNarrowDefinitionsKeepsWhatTheRoutesCarry: the definitions of the
// routes' payloads, of their responses and of what those refer to stay;
// the rest go.
func TestNarrowDefinitionsKeepsWhatTheRoutesCarry(t *testing.T) {
	name := func(v any) string { return util.GetCanonicalTypeName(v) }
	definitions := map[string]openapicommon.OpenAPIDefinition{
		name(&servedKind{}):   {Dependencies: []string{name(&servedSpec{})}},
		name(&servedList{}):   {Dependencies: []string{name(&servedKind{})}},
		name(&servedSpec{}):   {},
		name(&requestBody{}):  {},
		name(&errorStatus{}):  {},
		name(&unservedKind{}): {Dependencies: []string{name(&unservedSpec{})}},
		name(&unservedSpec{}): {},
	}
	service := new(restful.WebService).Path("/apis/example.com/v1")
	service.Route(service.GET("/things").To(func(*restful.Request, *restful.Response) {}).Writes(servedList{}))
	service.Route(service.POST("/things").To(func(*restful.Request, *restful.Response) {}).
		Reads(requestBody{}).Returns(200, "OK", servedKind{}).Returns(409, "Conflict", errorStatus{}))
	container := restful.NewContainer()
	container.Add(service)
	config := &openapicommon.OpenAPIV3Config{Definitions: definitions}

	kept, dropped := narrowDefinitions(config, container)

	var got []string
	for n := range config.Definitions {
		got = append(got, n)
	}
	slices.Sort(got)
	want := []string{name(&errorStatus{}), name(&requestBody{}), name(&servedKind{}), name(&servedList{}), name(&servedSpec{})}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	if kept != 5 || dropped != 2 {
		t.Errorf("narrowDefinitions reported %d kept and %d dropped, want 5 and 2", kept, dropped)
	}
}

// TestServedOnlyDropsWhatTheServerDoesNotServe: the narrowed function
// answers the served definitions only, built by the function it narrows.
func TestServedOnlyDropsWhatTheServerDoesNotServe(t *testing.T) {
	built := 0
	get := func(openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
		built++
		return map[string]openapicommon.OpenAPIDefinition{"a": {}, "b": {}, "c": {}}
	}
	served := map[string]openapicommon.OpenAPIDefinition{"a": {}, "c": {}}
	got := servedOnly(get, served)(nil)
	if built != 1 || len(got) != 2 {
		t.Fatalf("built %d times, answered %v; want one build answering a and c", built, got)
	}
	for name := range served {
		if _, ok := got[name]; !ok {
			t.Errorf("no definition %s", name)
		}
	}
}
