package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

type crdChurnParams struct {
	Cycles int
	// Old is a binary to measure the same way, side by side (optional).
	Old string
	// ProfileDir receives heap profiles before and after the cycles.
	ProfileDir string
	// Settle is how long the server idles before the second reading: the
	// watch caches keep 75 s of event history, which is not a leak.
	Settle time.Duration
}

// crdChurn creates and deletes a CRD (a new one each cycle, with a custom
// resource, a cached list and its OpenAPI document, so that every per-CRD
// structure is built) Cycles times in one plane, and compares the
// server's goroutines and live heap before and after: what a CRD leaves
// behind once it is gone.
func crdChurn(bin string, p crdChurnParams) (Result, error) {
	res := Result{Scenario: "crd-churn", Params: map[string]any{"cycles": p.Cycles}, Figures: map[string]float64{}}
	if err := churnOne(bin, p, res.Figures, ""); err != nil {
		return res, err
	}
	if p.Old != "" {
		res.Params["old_binary"] = "given"
		if err := churnOne(p.Old, p, res.Figures, "old_"); err != nil {
			return res, fmt.Errorf("old binary: %w", err)
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf("settled_*: read after the cycles and the settle; after_*: read after %d more cycles, "+
		"as later traffic would (upstream's watch cache keeps the CRDs' event history the churn grew until its ring is full again)", trimCycles))
	for _, prefix := range []string{"", "old_"} {
		g, h := res.Figures[prefix+"goroutines_ratio"], res.Figures[prefix+"live_heap_ratio"]
		if g == 0 {
			continue
		}
		res.Notes = append(res.Notes, fmt.Sprintf("%sgoroutines x%.2f, live heap x%.2f after %d cycles: %s (bound x1.10)",
			prefix, g, h, p.Cycles, verdict(g <= 1.10 && h <= 1.10)))
	}
	return res, nil
}

func churnOne(bin string, p crdChurnParams, figures map[string]float64, prefix string) error {
	cycles := p.Cycles
	s, err := startServer(bin)
	if err != nil {
		return err
	}
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	const plane = "churn"
	config := s.config(plane)
	config.QPS, config.Burst = 1000, 1000
	crds, err := apiextensionsclient.NewForConfig(config)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	c := churner{crds: crds, dyn: dyn}
	// Warm up: the first CRDs build what every later one reuses.
	for i := 0; i < 20; i++ {
		if err := c.cycle(ctx, -1-i); err != nil {
			return err
		}
	}
	before, beforeG, err := churnMemory(s)
	if err != nil {
		return err
	}
	if err := churnProfile(s, p.ProfileDir, prefix+"crd-churn-before.pb.gz"); err != nil {
		return err
	}
	start := time.Now()
	for i := 0; i < cycles; i++ {
		if err := c.cycle(ctx, i); err != nil {
			return fmt.Errorf("cycle %d: %w", i, err)
		}
	}
	figures[prefix+"cycle_ms"] = float64(time.Since(start).Milliseconds()) / float64(cycles)
	time.Sleep(p.Settle)
	settled, _, err := churnMemory(s)
	if err != nil {
		return err
	}
	settled.record(figures, prefix+"settled_")
	// Upstream's watch cache keeps a resource's event history at the size
	// its last 75 s of events needed, and shrinks it only once the ring is
	// full and new events arrive: after a burst that grew it, the churn's
	// events (a decoded CRD each) stay however old until later traffic
	// fills the ring again. A few more cycles, as later traffic would, show
	// whether anything else grows per CRD.
	for i := 0; i < trimCycles; i++ {
		if err := c.cycle(ctx, cycles+i); err != nil {
			return fmt.Errorf("trim cycle %d: %w", i, err)
		}
	}
	after, afterG, err := churnMemory(s)
	if err != nil {
		return err
	}
	if err := churnProfile(s, p.ProfileDir, prefix+"crd-churn-after.pb.gz"); err != nil {
		return err
	}
	before.record(figures, prefix+"before_")
	after.record(figures, prefix+"after_")
	figures[prefix+"goroutines_before"], figures[prefix+"goroutines_after"] = beforeG, afterG
	figures[prefix+"goroutines_ratio"] = afterG / beforeG
	figures[prefix+"live_heap_ratio"] = after.liveHeap / before.liveHeap
	return nil
}

func churnProfile(s *server, dir, name string) error {
	if dir == "" {
		return nil
	}
	return s.heapProfile(filepath.Join(dir, name))
}

// churnMemory reads memory and goroutines once the server is idle.
func churnMemory(s *server) (memory, float64, error) {
	m, err := measure(s)
	if err != nil {
		return m, 0, err
	}
	g, err := s.metric("go_goroutines")
	return m, g, err
}

// trimCycles are the cycles run after the settle, before the second
// reading, as later traffic would.
const trimCycles = 8

type churner struct {
	crds apiextensionsclient.Interface
	dyn  dynamic.Interface
}

// cycle creates CRD i, waits until it is established, creates and lists a
// custom resource, reads its OpenAPI document, deletes the CRD and waits
// until it is gone.
func (c churner) cycle(ctx context.Context, i int) error {
	crd := churnCRD(i)
	api := c.crds.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := api.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := waitEstablished(ctx, c.crds, crd.Name); err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: "v1", Resource: crd.Spec.Names.Plural}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": crd.Spec.Group + "/v1", "kind": crd.Spec.Names.Kind,
		"metadata": map[string]any{"name": "x", "namespace": "default"}, "spec": map[string]any{"n": int64(i)}}}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.dyn.Resource(gvr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{})
		// The plane's discovery may lag the Established condition by a
		// moment; a 404 is retried.
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("creating a %s: %w", crd.Spec.Names.Kind, err)
	}
	if _, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
		return err
	}
	if err := c.crds.Discovery().RESTClient().Get().AbsPath("/openapi/v3/apis/" + crd.Spec.Group + "/v1").Do(ctx).Error(); err != nil {
		return fmt.Errorf("OpenAPI of %s: %w", crd.Name, err)
	}
	if err := api.Delete(ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// churnCRD is a small namespaced CRD whose schema differs in every cycle
// (a new content: new handler, storage, watch cache and OpenAPI document)
// under one name, as a user iterating on a CRD makes them.
func churnCRD(i int) *apiextensionsv1.CustomResourceDefinition {
	group := "churn.example.org"
	field := fmt.Sprintf("f%d", i+1000)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "things." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "things", Singular: "thing", Kind: "Thing"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"n": {Type: "integer"}, field: {Type: "string"}}},
					},
				}},
			}},
		},
	}
}

// waitEstablished waits until CRD name is established.
func waitEstablished(ctx context.Context, crds apiextensionsclient.Interface, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%s not established: %w", name, err)
	}
	return nil
}
