package snapshot

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kplane.dev/kplane/planes/crds"
)

// resourceInfo is a resource a plane serves and can list, at its preferred
// version (the first version of its group, in discovery order, that serves
// it: the one kubectl uses).
type resourceInfo struct {
	gvr        schema.GroupVersionResource
	kind       string
	singular   string
	shortNames []string
	namespaced bool
	// custom: served from a CRD of the plane.
	custom bool
}

func (r *resourceInfo) name() string {
	if r.gvr.Group == "" {
		return r.gvr.Resource
	}
	return r.gvr.Resource + "." + r.gvr.Group
}

// matches reports whether a resource= name (lower case, unqualified) names
// r: its plural, singular, kind or a short name.
func (r *resourceInfo) matches(name string) bool {
	if name == r.gvr.Resource || name == r.singular || name == strings.ToLower(r.kind) {
		return true
	}
	for _, s := range r.shortNames {
		if name == s {
			return true
		}
	}
	return false
}

const aggregatedDiscovery = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// builtinResources reads the server's aggregated discovery documents (the
// core group first, then /apis) and returns every listable resource once,
// at its preferred version, in discovery order.
func builtinResources(documents []http.Handler) ([]*resourceInfo, error) {
	var out []*resourceInfo
	seen := map[schema.GroupResource]bool{}
	for _, h := range documents {
		req := httptest.NewRequest(http.MethodGet, "/apis", nil)
		req.Header.Set("Accept", aggregatedDiscovery)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return nil, fmt.Errorf("reading discovery: %d %s", rec.Code, strings.TrimSpace(rec.Body.String()))
		}
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
			return nil, fmt.Errorf("reading discovery: %w", err)
		}
		for _, group := range list.Items {
			for _, version := range group.Versions {
				for _, res := range version.Resources {
					gr := schema.GroupResource{Group: group.Name, Resource: res.Resource}
					if seen[gr] || !hasVerb(res.Verbs, "list") || res.ResponseKind == nil {
						continue
					}
					seen[gr] = true
					out = append(out, &resourceInfo{
						gvr:        gr.WithVersion(version.Version),
						kind:       res.ResponseKind.Kind,
						singular:   res.SingularResource,
						shortNames: res.ShortNames,
						namespaced: res.Scope == apidiscoveryv2.ScopeNamespace,
					})
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("reading discovery: no resources")
	}
	return out, nil
}

func hasVerb(verbs []string, verb string) bool {
	for _, v := range verbs {
		if v == verb {
			return true
		}
	}
	return false
}

// customResources are the resources of a plane's CRDs.
func customResources(in []crds.CustomResource) []*resourceInfo {
	out := make([]*resourceInfo, 0, len(in))
	for _, r := range in {
		out = append(out, &resourceInfo{
			gvr: r.Resource, kind: r.Kind, singular: r.Singular,
			shortNames: r.ShortNames, namespaced: r.Namespaced, custom: true,
		})
	}
	return out
}

// resolve picks the resources named by resource= from all (in all's
// order). A name is a plural, singular, kind or short name, optionally
// qualified by its group: "pods", "deployments.apps", "apps/deployments".
// An unqualified name that several groups serve means the first one (the
// core group before the others), as in kubectl.
func resolve(all []*resourceInfo, names []string) ([]*resourceInfo, error) {
	if len(names) == 0 {
		return all, nil
	}
	picked := map[*resourceInfo]bool{}
	var unknown []string
	for _, raw := range names {
		r := lookup(all, strings.ToLower(raw))
		if r == nil {
			unknown = append(unknown, raw)
			continue
		}
		picked[r] = true
	}
	if len(unknown) > 0 {
		valid := make([]string, 0, len(all))
		for _, r := range all {
			valid = append(valid, r.name())
		}
		sort.Strings(valid)
		return nil, fmt.Errorf("unknown resource %s; this plane serves: %s",
			quoteAll(unknown), strings.Join(valid, ", "))
	}
	out := make([]*resourceInfo, 0, len(picked))
	for _, r := range all {
		if picked[r] {
			out = append(out, r)
		}
	}
	return out, nil
}

func lookup(all []*resourceInfo, name string) *resourceInfo {
	var group string
	qualified := false
	if g, res, ok := strings.Cut(name, "/"); ok {
		group, name, qualified = g, res, true
	} else if res, g, ok := strings.Cut(name, "."); ok {
		group, name, qualified = g, res, true
	}
	if qualified && group == "core" {
		group = ""
	}
	for _, r := range all {
		if qualified && r.gvr.Group != group {
			continue
		}
		if r.matches(name) {
			return r
		}
	}
	return nil
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
