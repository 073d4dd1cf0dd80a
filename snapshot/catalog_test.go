package snapshot

import (
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func testCatalog() []*resourceInfo {
	return []*resourceInfo{
		{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, kind: "Pod", singular: "pod", shortNames: []string{"po"}, namespaced: true},
		{gvr: schema.GroupVersionResource{Version: "v1", Resource: "events"}, kind: "Event", singular: "event", shortNames: []string{"ev"}, namespaced: true},
		{gvr: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, kind: "Deployment", singular: "deployment", shortNames: []string{"deploy"}, namespaced: true},
		{gvr: schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "events"}, kind: "Event", singular: "event", namespaced: true, custom: true},
	}
}

func TestResolve(t *testing.T) {
	all := testCatalog()
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{nil, "pods,events,deployments.apps,events.example.com"},
		{[]string{"pods"}, "pods"},
		{[]string{"Pod", "po"}, "pods"},
		{[]string{"deployments.apps"}, "deployments.apps"},
		{[]string{"apps/deployments"}, "deployments.apps"},
		{[]string{"deploy", "pods"}, "pods,deployments.apps"},
		// An unqualified name several groups serve is the core one.
		{[]string{"events"}, "events"},
		{[]string{"core/events"}, "events"},
		{[]string{"events.example.com"}, "events.example.com"},
		{[]string{"example.com/event"}, "events.example.com"},
	} {
		got, err := resolve(all, tc.names)
		if err != nil {
			t.Fatalf("%v: %v", tc.names, err)
		}
		var names []string
		for _, r := range got {
			names = append(names, r.name())
		}
		if strings.Join(names, ",") != tc.want {
			t.Errorf("%v: got %v, want %s", tc.names, names, tc.want)
		}
	}
	_, err := resolve(all, []string{"pods", "gizmos", "deployments.batch"})
	if err == nil || !strings.Contains(err.Error(), `unknown resource "gizmos", "deployments.batch"`) ||
		!strings.Contains(err.Error(), "deployments.apps, events, events.example.com, pods") {
		t.Fatalf("unknown names: %v", err)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions(url.Values{
		"resource":        {"pods, deployments.apps", "cm"},
		"includeEmpty":    {"true"},
		"namespace":       {"team"},
		"labelSelector":   {"app=web,tier!=db"},
		"watch":           {"1"},
		"resourceVersion": {"42"},
		"timeoutSeconds":  {"5"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.Resources, "|") != "pods|deployments.apps|cm" || !o.IncludeEmpty || o.Namespace != "team" ||
		o.LabelSelector.String() != "app=web,tier!=db" || !o.Watch || o.ResourceVersion != 42 || o.Timeout.Seconds() != 5 {
		t.Fatalf("parsed %+v", o)
	}
	for query, want := range map[string]string{
		"includeEmpty=yes":             "includeEmpty",
		"warm=2":                       "warm",
		"namespace=Not_A_Name":         "namespace",
		"labelSelector=a%3D%3D%3Db":    "labelSelector",
		"resourceVersion=7":            "watch=true",
		"watch=true&resourceVersion=x": "resourceVersion",
		"timeoutSeconds=-1":            "timeoutSeconds",
	} {
		q, _ := url.ParseQuery(query)
		if _, err := ParseOptions(q); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error about %s", query, err, want)
		}
	}
}
