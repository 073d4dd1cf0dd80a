package crds

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apiserver/pkg/endpoints/discovery"
)

const aggregatedContentType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// planeDiscovery is the discovery of one plane's CRDs.
type planeDiscovery struct {
	version    uint64
	groups     []metav1.APIGroup
	resources  map[schema.GroupVersion]*metav1.APIResourceList
	aggregated []apidiscoveryv2.APIGroupDiscovery
}

// discoveryCache holds the discovery of each plane with CRDs, rebuilt when
// the plane's CRDs change, and the built-in discovery it is merged into.
type discoveryCache struct {
	index *Index

	mu      sync.Mutex
	byPlane map[string]*planeDiscovery

	builtinMu  sync.Mutex
	builtinV1  *metav1.APIGroupList
	builtinAgg *apidiscoveryv2.APIGroupDiscoveryList
}

func (d *discoveryCache) forPlane(plane string) *planeDiscovery {
	entries, v := d.index.List(plane)
	d.mu.Lock()
	defer d.mu.Unlock()
	if pd, ok := d.byPlane[plane]; ok && pd.version == v {
		return pd
	}
	pd := buildDiscovery(entries)
	pd.version = v
	d.byPlane[plane] = pd
	return pd
}

func (d *discoveryCache) forget(plane string) {
	d.mu.Lock()
	delete(d.byPlane, plane)
	d.mu.Unlock()
}

// servedVersions returns the served versions of crd, newest first (the
// first is the preferred one), as upstream orders them.
func servedVersions(crd *apiextensionsv1.CustomResourceDefinition) []string {
	var out []string
	for _, v := range crd.Spec.Versions {
		if v.Served {
			out = append(out, v.Name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(out[i], out[j]) > 0 })
	return out
}

func buildDiscovery(entries []*entry) *planeDiscovery {
	pd := &planeDiscovery{resources: map[schema.GroupVersion]*metav1.APIResourceList{}}
	groupVersions := map[string]map[string]bool{}
	aggregated := map[schema.GroupVersion][]apidiscoveryv2.APIResourceDiscovery{}
	for _, e := range entries {
		crd := e.crd
		if !apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established) {
			continue
		}
		group := crd.Spec.Group
		if groupVersions[group] == nil {
			groupVersions[group] = map[string]bool{}
		}
		names := crd.Status.AcceptedNames
		namespaced := crd.Spec.Scope == apiextensionsv1.NamespaceScoped
		verbs := metav1.Verbs{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}
		if apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Terminating) {
			verbs = metav1.Verbs{"delete", "deletecollection", "get", "list", "watch"}
		}
		var storageHash string
		for _, v := range crd.Spec.Versions {
			if v.Storage {
				storageHash = discovery.StorageVersionHash(group, v.Name, names.Kind)
			}
		}
		for _, v := range servedVersions(crd) {
			groupVersions[group][v] = true
			gv := schema.GroupVersion{Group: group, Version: v}
			list := pd.resources[gv]
			if list == nil {
				list = &metav1.APIResourceList{GroupVersion: gv.String()}
				pd.resources[gv] = list
			}
			list.APIResources = append(list.APIResources, metav1.APIResource{
				Name: names.Plural, SingularName: names.Singular, Namespaced: namespaced, Kind: names.Kind,
				Verbs: verbs, ShortNames: names.ShortNames, Categories: names.Categories, StorageVersionHash: storageHash,
			})
			scope := apidiscoveryv2.ScopeCluster
			if namespaced {
				scope = apidiscoveryv2.ScopeNamespace
			}
			res := apidiscoveryv2.APIResourceDiscovery{
				Resource: names.Plural, SingularResource: names.Singular, Scope: scope,
				ResponseKind: &metav1.GroupVersionKind{Group: group, Version: v, Kind: names.Kind},
				Verbs:        verbs, ShortNames: names.ShortNames, Categories: names.Categories,
			}
			sub, _ := apihelpers.GetSubresourcesForVersion(crd, v)
			if sub != nil && sub.Status != nil {
				list.APIResources = append(list.APIResources, metav1.APIResource{
					Name: names.Plural + "/status", Namespaced: namespaced, Kind: names.Kind, Verbs: metav1.Verbs{"get", "patch", "update"}})
				res.Subresources = append(res.Subresources, apidiscoveryv2.APISubresourceDiscovery{
					Subresource: "status", ResponseKind: &metav1.GroupVersionKind{Group: group, Version: v, Kind: names.Kind},
					Verbs: metav1.Verbs{"get", "patch", "update"}})
			}
			if sub != nil && sub.Scale != nil {
				list.APIResources = append(list.APIResources, metav1.APIResource{
					Name: names.Plural + "/scale", Namespaced: namespaced, Group: autoscalingv1.GroupName, Version: "v1", Kind: "Scale",
					Verbs: metav1.Verbs{"get", "patch", "update"}})
				res.Subresources = append(res.Subresources, apidiscoveryv2.APISubresourceDiscovery{
					Subresource: "scale", ResponseKind: &metav1.GroupVersionKind{Group: autoscalingv1.GroupName, Version: "v1", Kind: "Scale"},
					Verbs: metav1.Verbs{"get", "patch", "update"}})
			}
			aggregated[gv] = append(aggregated[gv], res)
		}
	}

	groups := make([]string, 0, len(groupVersions))
	for g := range groupVersions {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		versions := make([]string, 0, len(groupVersions[g]))
		for v := range groupVersions[g] {
			versions = append(versions, v)
		}
		sort.Slice(versions, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(versions[i], versions[j]) > 0 })
		apiGroup := metav1.APIGroup{Name: g}
		aggGroup := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g}}
		for _, v := range versions {
			gvd := metav1.GroupVersionForDiscovery{GroupVersion: g + "/" + v, Version: v}
			apiGroup.Versions = append(apiGroup.Versions, gvd)
			resources := aggregated[schema.GroupVersion{Group: g, Version: v}]
			sort.Slice(resources, func(i, j int) bool { return resources[i].Resource < resources[j].Resource })
			aggGroup.Versions = append(aggGroup.Versions, apidiscoveryv2.APIVersionDiscovery{
				Version: v, Resources: resources, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent})
		}
		apiGroup.PreferredVersion = apiGroup.Versions[0]
		pd.groups = append(pd.groups, apiGroup)
		pd.aggregated = append(pd.aggregated, aggGroup)
	}
	for _, list := range pd.resources {
		sort.Slice(list.APIResources, func(i, j int) bool { return list.APIResources[i].Name < list.APIResources[j].Name })
	}
	return pd
}

// group returns the discovery of one CRD group.
func (pd *planeDiscovery) group(name string) (*metav1.APIGroup, bool) {
	for i := range pd.groups {
		if pd.groups[i].Name == name {
			return &pd.groups[i], true
		}
	}
	return nil, false
}

func wantsAggregated(req *http.Request) bool {
	accept := req.Header.Get("Accept")
	return strings.Contains(accept, "g=apidiscovery.k8s.io") && strings.Contains(accept, "as=APIGroupDiscoveryList")
}

// builtin returns the server's own /apis discovery (built-in groups only;
// it never changes after start), asking the handler it wraps once.
func (d *discoveryCache) builtin(next http.Handler, req *http.Request, aggregated bool) (any, error) {
	d.builtinMu.Lock()
	defer d.builtinMu.Unlock()
	if aggregated && d.builtinAgg != nil {
		return d.builtinAgg, nil
	}
	if !aggregated && d.builtinV1 != nil {
		return d.builtinV1, nil
	}
	r := req.Clone(req.Context())
	r.Header.Del("If-None-Match")
	r.Header.Del("Accept-Encoding")
	if aggregated {
		r.Header.Set("Accept", aggregatedContentType)
	} else {
		r.Header.Set("Accept", "application/json")
	}
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		return nil, &statusError{code: rec.Code, body: rec.Body.String()}
	}
	if aggregated {
		list := &apidiscoveryv2.APIGroupDiscoveryList{}
		if err := json.Unmarshal(rec.Body.Bytes(), list); err != nil {
			return nil, err
		}
		d.builtinAgg = list
		return list, nil
	}
	list := &metav1.APIGroupList{}
	if err := json.Unmarshal(rec.Body.Bytes(), list); err != nil {
		return nil, err
	}
	d.builtinV1 = list
	return list, nil
}

type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return e.body }

// serveAPIs serves /apis for a plane with CRDs: the built-in groups, then
// the plane's CRD groups.
func (d *discoveryCache) serveAPIs(w http.ResponseWriter, req *http.Request, next http.Handler, pd *planeDiscovery) {
	aggregated := wantsAggregated(req)
	base, err := d.builtin(next, req, aggregated)
	if err != nil {
		next.ServeHTTP(w, req)
		return
	}
	if aggregated {
		list := *base.(*apidiscoveryv2.APIGroupDiscoveryList)
		list.Items = append(append([]apidiscoveryv2.APIGroupDiscovery(nil), list.Items...), pd.aggregated...)
		writeJSON(w, aggregatedContentType, &list)
		return
	}
	list := *base.(*metav1.APIGroupList)
	list.Groups = append(append([]metav1.APIGroup(nil), list.Groups...), pd.groups...)
	writeJSON(w, "application/json", &list)
}

func writeJSON(w http.ResponseWriter, contentType string, obj any) {
	data, err := json.Marshal(obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}
