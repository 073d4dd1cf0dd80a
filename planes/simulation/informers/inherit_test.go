package informers

import (
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	api "k8s.io/kubernetes/pkg/apis/core"

	planestorage "kplane.dev/kplane/planes/storage"
)

// chain is a Templates of fixed planes.
type chain map[string]string

func (c chain) Inherits(plane string) string { return c[plane] }
func (c chain) Dependents(template string) []string {
	var out []string
	for p, t := range c {
		if t == template {
			out = append(out, p)
		}
	}
	return out
}

func pod(name string, tombstone bool) runtime.Object {
	p := &api.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	if tombstone {
		p.Annotations = map[string]string{planestorage.LayerAnnotation: planestorage.LayerDeleted}
	}
	return p
}

func layerOf(objs ...runtime.Object) records {
	out := records{}
	for _, o := range objs {
		out[recordKey(o)] = o
	}
	return out
}

// TestViewThroughTemplates: a plane shows its own records over its
// template's view, without what a tombstone deleted at any layer.
func TestViewThroughTemplates(t *testing.T) {
	own := map[string]records{
		"base-scenario": layerOf(pod("a", false), pod("b", false), pod("c", false)),
		"scenario":      layerOf(pod("b", true), pod("d", false)),
		"member":        layerOf(pod("a", false), pod("c", true)),
	}
	s := &source{templates: chain{"scenario": "base-scenario", "member": "scenario"}}
	l := &layers{own: func(p string) (records, error) { return own[p], nil }, views: map[string]records{}}
	for plane, want := range map[string]string{
		"base-scenario": "default/a default/b default/c",
		"scenario":      "default/a default/c default/d",
		"member":        "default/a default/d",
	} {
		v, err := l.view(s, plane, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for k := range v {
			got = append(got, k)
		}
		sort.Strings(got)
		if strings.Join(got, " ") != want {
			t.Errorf("view of %s = %v, want %s", plane, got, want)
		}
	}
	if v := l.views["member"]; v["default/a"] != own["member"]["default/a"] {
		t.Errorf("member's own record of a does not hide the inherited one")
	}
}

// TestViewRefusesEndlessChains: a corrupt chain ends in an error, not a loop.
func TestViewRefusesEndlessChains(t *testing.T) {
	s := &source{templates: chain{"x": "y", "y": "x"}}
	l := &layers{own: func(string) (records, error) { return nil, nil }, views: map[string]records{}}
	if _, err := l.view(s, "x", 0); err == nil {
		t.Fatal("a cycle of templates gave a view")
	}
}

// TestOwnRecordsNotListedWhereNoneAreHeld: a plane the counts know holds no
// record of the resource (a Fleet's new member) is not listed at all;
// the store, nil here, would be.
func TestOwnRecordsNotListedWhereNoneAreHeld(t *testing.T) {
	var asked []string
	s := newSource(nil, pods, nil, chain{"member": "scenario"}).withOwnRecordsKnown(
		func(plane string, _ *planestorage.Store) bool { asked = append(asked, plane); return false })
	own, err := s.ownRecords(t.Context(), "member")
	if err != nil || len(own) != 0 {
		t.Fatalf("own records of a plane that holds none: %v, %v", own, err)
	}
	if len(asked) != 1 || asked[0] != "member" {
		t.Fatalf("asked about %v, want [member]", asked)
	}
}

// TestKeepDecidedOncePerRecordVersion: whether the controllers want a
// template's record is decided once per version of the record, for every
// member that inherits it.
func TestKeepDecidedOncePerRecordVersion(t *testing.T) {
	calls := 0
	k := services
	k.keep = func(obj runtime.Object) bool {
		calls++
		return services.keep(obj)
	}
	s := newSource(&planestorage.Store{}, k, nil, chain{"a": "tmpl", "b": "tmpl"})
	svc := &api.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db", ResourceVersion: "7"}}
	for _, plane := range []string{"a", "b", "a"} {
		if s.kept("shop/db", svc, plane) {
			t.Fatalf("a Service without a selector kept for %s", plane)
		}
	}
	if calls != 1 {
		t.Fatalf("keep asked %d times about one version, want 1", calls)
	}
	changed := svc.DeepCopy()
	changed.ResourceVersion = "9"
	changed.Spec.Selector = map[string]string{"app": "db"}
	if !s.kept("shop/db", changed, "b") {
		t.Fatal("a new version with a selector not kept")
	}
	if calls != 2 {
		t.Fatalf("keep asked %d times about two versions, want 2", calls)
	}
}
