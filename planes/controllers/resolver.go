package controllers

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/planes/crds"
	planestorage "kplane.dev/kplane/planes/storage"
)

// builtin is how every plane serves one built-in resource.
type builtin struct {
	resource   schema.GroupVersionResource
	namespaced bool
	kind       string
}

// resolver maps kinds to resources: built-ins from the server's discovery
// (learned once), custom resources from the plane's own CRDs.
type resolver struct {
	discovery *rest.Config
	storage   *planestorage.Registry
	crds      *crds.Server

	mu        sync.Mutex
	byKind    map[schema.GroupKind]builtin
	byGR      map[schema.GroupResource]builtin
	populated bool
	// namespaced lists the built-in namespaced resources, as discovery
	// serves them in every plane.
	namespaced []*metav1.APIResourceList
}

func newResolver(discovery *rest.Config, storage *planestorage.Registry, crds *crds.Server) *resolver {
	return &resolver{discovery: discovery, storage: storage, crds: crds}
}

// ForKind implements gc.Resolver.
func (r *resolver) ForKind(ctx context.Context, plane string, gk schema.GroupKind) (schema.GroupVersionResource, bool, bool) {
	if r.crds != nil {
		if cr, ok := r.crds.ForKind(plane, gk); ok {
			return cr.Resource, cr.Namespaced, true
		}
	}
	if !r.populate(ctx) {
		return schema.GroupVersionResource{}, false, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.byKind[gk]
	return b.resource, b.namespaced, ok
}

// Version implements gc.Resolver.
func (r *resolver) Version(ctx context.Context, plane string, gr schema.GroupResource) (string, bool) {
	if r.crds != nil {
		if cr, ok := r.crds.ForResource(plane, gr); ok {
			return cr.Resource.Version, true
		}
	}
	if !r.populate(ctx) {
		return "", false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.byGR[gr]
	return b.resource.Version, ok
}

// KindFor returns the kind of resource gr in plane.
func (r *resolver) KindFor(ctx context.Context, plane string, gr schema.GroupResource) (string, bool) {
	if r.crds != nil {
		if cr, ok := r.crds.ForResource(plane, gr); ok {
			return cr.Kind, true
		}
	}
	if !r.populate(ctx) {
		return "", false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.byGR[gr]
	return b.kind, ok
}

// populate learns the built-in resources once; a failed attempt is retried
// on the next call.
func (r *resolver) populate(context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.populated {
		return true
	}
	client, err := discovery.NewDiscoveryClientForConfig(r.discovery)
	if err != nil {
		return false
	}
	lists, err := client.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return false
	}
	byKind := map[schema.GroupKind]builtin{}
	byGR := map[schema.GroupResource]builtin{}
	var namespaced []*metav1.APIResourceList
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		kept := &metav1.APIResourceList{GroupVersion: list.GroupVersion}
		for _, res := range list.APIResources {
			gr := gv.WithResource(res.Name).GroupResource()
			// Only resources built into the server: the root plane's own
			// CRDs are custom resources like any plane's.
			s := r.storage.Storage(gr)
			if s == nil {
				continue
			}
			if _, custom := s.New().(*unstructured.Unstructured); custom {
				continue
			}
			b := builtin{resource: gv.WithResource(res.Name), namespaced: res.Namespaced, kind: res.Kind}
			byKind[gv.WithKind(res.Kind).GroupKind()] = b
			byGR[gr] = b
			if res.Namespaced {
				kept.APIResources = append(kept.APIResources, res)
			}
		}
		if len(kept.APIResources) > 0 {
			namespaced = append(namespaced, kept)
		}
	}
	r.byKind, r.byGR, r.namespaced, r.populated = byKind, byGR, namespaced, true
	return true
}

// customResourceVerbs are the verbs every custom resource serves.
var customResourceVerbs = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// NamespacedResources returns what discovery of plane lists as namespaced
// resources at their preferred versions, without asking it: the built-in
// ones are the same in every plane, the custom ones come from the plane's
// CRDs. Serving a plane's discovery documents costs far more than this.
func (r *resolver) NamespacedResources(ctx context.Context, plane string) ([]*metav1.APIResourceList, error) {
	if !r.populate(ctx) {
		return nil, fmt.Errorf("the server's discovery is not available yet")
	}
	r.mu.Lock()
	out := append([]*metav1.APIResourceList{}, r.namespaced...)
	r.mu.Unlock()
	if r.crds == nil {
		return out, nil
	}
	byGV := map[string]*metav1.APIResourceList{}
	for _, cr := range r.crds.CustomResources(plane) {
		if !cr.Namespaced {
			continue
		}
		gv := cr.Resource.GroupVersion().String()
		list := byGV[gv]
		if list == nil {
			list = &metav1.APIResourceList{GroupVersion: gv}
			byGV[gv] = list
			out = append(out, list)
		}
		list.APIResources = append(list.APIResources, metav1.APIResource{
			Name: cr.Resource.Resource, Namespaced: true, Kind: cr.Kind, Verbs: customResourceVerbs,
		})
	}
	return out, nil
}

// coreResource is the group/resource of a core resource name.
func coreResource(resource string) schema.GroupResource {
	return schema.GroupResource{Resource: resource}
}
