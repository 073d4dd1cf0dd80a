package quota

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/kubernetes/pkg/quota/v1/evaluator/core"
)

// served tells the core evaluators which resources exist: every plane
// serves the built-in API minus resource.k8s.io (DRA), whose evaluator
// would also need informers of its own.
func served(gvr schema.GroupVersionResource) bool { return gvr.Group != "resource.k8s.io" }

// Evaluators returns upstream's evaluators on listers (nil: usage of
// single objects only, as admission needs): the core ones (pods, services,
// persistentvolumeclaims and the legacy counts of configmaps, secrets,
// resourcequotas, replicationcontrollers) and an object count evaluator
// for every other resource hard names as count/<resource>[.<group>],
// custom resources included. Upstream's controller finds the latter
// through discovery; a quota names them, which is all a sync needs.
func Evaluators(listers quota.ListerForResourceFunc, hard corev1.ResourceList) (quota.Registry, error) {
	evaluators, err := core.NewEvaluators(listers, nil, served)
	if err != nil {
		return nil, err
	}
	registry := generic.NewRegistry(evaluators)
	for name := range hard {
		gr, ok := CountedResource(name)
		if !ok || registry.Get(gr) != nil {
			continue
		}
		var list generic.ListFuncByNamespace
		if listers != nil {
			list = generic.ListResourceUsingListerFunc(listers, gr.WithVersion(""))
		}
		registry.Add(generic.NewObjectCountEvaluator(gr, list, ""))
	}
	return registry, nil
}

// CountedResource returns the group/resource of a count/<resource>[.<group>]
// quota name.
func CountedResource(name corev1.ResourceName) (schema.GroupResource, bool) {
	rest, ok := strings.CutPrefix(string(name), "count/")
	if !ok || rest == "" {
		return schema.GroupResource{}, false
	}
	resource, group, _ := strings.Cut(rest, ".")
	return schema.GroupResource{Group: group, Resource: resource}, true
}
