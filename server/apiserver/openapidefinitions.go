package apiserver

import (
	"maps"

	restful "github.com/emicklei/go-restful/v3"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
)

// narrowDefinitions keeps in config.Definitions only the types the routes
// of container carry (request bodies, responses) and the types those
// refer to, and returns how many it kept and dropped. Call it once every
// route is installed, before the documents are built.
//
// Upstream's DefaultOpenAPIV3Config fills Definitions with every type of
// the generated package (kubelet, kube-proxy and controller-manager
// configurations, every workload type, whether served or not) and the
// server holds the map for its life: 6.4 MiB of an empty generic server's
// 25.5 MiB live heap (exact heap profile, GODEBUG=memprofilerate=1), of
// which the generic profile serves a small part. What reads the map after
// install reads it through the routes: the v3 documents, built from the
// same routes, and the built-in type converter of mutating policies, whose
// kinds are those the routes serve. Each install-time type converter (one
// per API group, for server-side apply) was built before.
func narrowDefinitions(config *openapicommon.OpenAPIV3Config, container *restful.Container) (kept, dropped int) {
	if config == nil || config.Definitions == nil {
		return 0, 0
	}
	used := make(map[string]openapicommon.OpenAPIDefinition)
	var keep func(name string)
	keep = func(name string) {
		if _, seen := used[name]; seen {
			return
		}
		definition, ok := config.Definitions[name]
		if !ok {
			return
		}
		used[name] = definition
		for _, dependency := range definition.Dependencies {
			keep(dependency)
		}
	}
	for _, service := range container.RegisteredWebServices() {
		for _, route := range service.Routes() {
			for _, model := range routeModels(route) {
				keep(util.GetCanonicalTypeName(model))
			}
		}
	}
	dropped = len(config.Definitions) - len(used)
	config.Definitions = used
	return len(used), dropped
}

// routeModels are the typed payloads of route, as the OpenAPI builders
// read them.
func routeModels(route restful.Route) []any {
	var models []any
	for _, sample := range []any{route.ReadSample, route.WriteSample} {
		if sample != nil {
			models = append(models, sample)
		}
	}
	for _, response := range route.ResponseErrors {
		if response.Model != nil {
			models = append(models, response.Model)
		}
	}
	return models
}

// servedOnly is get narrowed to the definitions served holds (the map
// narrowDefinitions kept). The admission policies' type checker builds
// its own map of every type's definition, with references of its own
// form, and holds it once the first policy is checked: narrowed, it holds
// the served types' only.
func servedOnly(get openapicommon.GetOpenAPIDefinitions, served map[string]openapicommon.OpenAPIDefinition) openapicommon.GetOpenAPIDefinitions {
	if served == nil {
		return get
	}
	return func(ref openapicommon.ReferenceCallback) map[string]openapicommon.OpenAPIDefinition {
		definitions := get(ref)
		maps.DeleteFunc(definitions, func(name string, _ openapicommon.OpenAPIDefinition) bool {
			_, ok := served[name]
			return !ok
		})
		return definitions
	}
}
