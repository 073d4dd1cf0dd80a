package quota

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCountedResource(t *testing.T) {
	for name, want := range map[corev1.ResourceName]schema.GroupResource{
		"count/configmaps":                  {Resource: "configmaps"},
		"count/deployments.apps":            {Group: "apps", Resource: "deployments"},
		"count/rayservices.ray.example.com": {Group: "ray.example.com", Resource: "rayservices"},
		"count/widgets.v1.example.org":      {Group: "v1.example.org", Resource: "widgets"},
	} {
		got, ok := CountedResource(name)
		if !ok || got != want {
			t.Errorf("%s: got %v %v, want %v", name, got, ok, want)
		}
	}
	for _, name := range []corev1.ResourceName{"configmaps", "requests.cpu", "count/"} {
		if gr, ok := CountedResource(name); ok {
			t.Errorf("%s: got %v, want none", name, gr)
		}
	}
}

// TestEvaluatorsCountNamedResources: a quota's count/ names get an object
// count evaluator next to upstream's core ones.
func TestEvaluatorsCountNamedResources(t *testing.T) {
	one := resource.MustParse("1")
	registry, err := Evaluators(nil, corev1.ResourceList{"count/rayservices.ray.example.com": one, "count/configmaps": one})
	if err != nil {
		t.Fatal(err)
	}
	ray := schema.GroupResource{Group: "ray.example.com", Resource: "rayservices"}
	e := registry.Get(ray)
	if e == nil {
		t.Fatal("no evaluator for rayservices")
	}
	if got := e.MatchingResources([]corev1.ResourceName{"count/rayservices.ray.example.com", "pods"}); len(got) != 1 {
		t.Fatalf("rayservices evaluator matches %v", got)
	}
	// configmaps keep upstream's evaluator with its legacy alias.
	if got := registry.Get(corev1.Resource("configmaps")).MatchingResources([]corev1.ResourceName{"configmaps"}); len(got) != 1 {
		t.Fatalf("configmaps evaluator matches %v", got)
	}
	if registry.Get(corev1.Resource("pods")) == nil {
		t.Fatal("no core pod evaluator")
	}
}
