package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

type crdParams struct {
	Planes     int
	Workers    int
	CRDs       int
	CRsPerCRD  int
	SchemaSize int // approximate JSON size of each CRD's schema, bytes
	ProfileDir string
}

// benchCRD returns a CRD whose schema is about size bytes of JSON: many
// documented properties, nested, the way generated operator CRDs look.
func benchCRD(i, size int) *apiextensionsv1.CustomResourceDefinition {
	props := map[string]apiextensionsv1.JSONSchemaProps{}
	desc := strings.Repeat("Describes a knob of the workload, its units and its default. ", 2)
	for n := 0; n*170 < size; n++ {
		props[fmt.Sprintf("field%04d", n)] = apiextensionsv1.JSONSchemaProps{
			Type: "object", Description: desc,
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"value":   {Type: "string", MaxLength: ptr64(256)},
				"enabled": {Type: "boolean"},
			},
		}
	}
	plural := fmt.Sprintf("benchkind%ds", i)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".bench.kplane.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "bench.kplane.dev", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: fmt.Sprintf("benchkind%d", i), Kind: fmt.Sprintf("BenchKind%d", i)},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec":   {Type: "object", Properties: props},
						"status": {Type: "object", XPreserveUnknownFields: ptrBool(true)},
					},
				}},
			}},
		},
	}
}

func ptr64(v int64) *int64 { return &v }
func ptrBool(v bool) *bool { return &v }

// crdDensity installs the same CRDs and CRsPerCRD custom resources in every
// plane and reports the marginal memory per plane.
func crdDensity(binary string, p crdParams) (Result, error) {
	s, err := startServer(binary)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	rss0, heap0, err := settle(s)
	if err != nil {
		return Result{}, err
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, p.CRDs)
	for i := range crds {
		crds[i] = benchCRD(i, p.SchemaSize)
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, p.Workers)
	began := time.Now()
	for w := 0; w < p.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := installCRDs(s, fmt.Sprintf("crd-%05d", i), crds, p.CRsPerCRD); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < p.Planes; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(began)
	select {
	case err := <-errs:
		return Result{}, err
	default:
	}
	rss1, heap1, err := settle(s)
	if err != nil {
		return Result{}, err
	}
	if p.ProfileDir != "" {
		if err := s.heapProfile(filepath.Join(p.ProfileDir, "crds.heap")); err != nil {
			return Result{}, err
		}
	}
	const mib = 1 << 20
	return Result{
		Scenario: "crd-density",
		Params: map[string]any{"planes": p.Planes, "workers": p.Workers, "crdsPerPlane": p.CRDs,
			"crsPerCRD": p.CRsPerCRD, "schemaBytes": p.SchemaSize},
		Figures: map[string]float64{
			"rss_start_mib":               rss0 / mib,
			"rss_end_mib":                 rss1 / mib,
			"heap_inuse_start_mib":        heap0 / mib,
			"heap_inuse_end_mib":          heap1 / mib,
			"marginal_rss_mib_per_plane":  (rss1 - rss0) / mib / float64(p.Planes),
			"marginal_heap_mib_per_plane": (heap1 - heap0) / mib / float64(p.Planes),
			"planes_per_second":           float64(p.Planes) / elapsed.Seconds(),
		},
	}, nil
}

func installCRDs(s *server, plane string, crds []*apiextensionsv1.CustomResourceDefinition, crs int) error {
	ctx := context.Background()
	cfg := s.config(plane)
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("plane %s: %w", plane, err)
		}
	}
	for _, crd := range crds {
		gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: "v1", Resource: crd.Spec.Names.Plural}
		for i := 0; i < crs; i++ {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": crd.Spec.Group + "/v1", "kind": crd.Spec.Names.Kind,
				"metadata": map[string]any{"name": fmt.Sprintf("cr-%d", i), "namespace": "default"},
				"spec":     map[string]any{"field0001": map[string]any{"value": "x", "enabled": true}},
			}}
			// The CRD is served once established, a moment after creation.
			deadline := time.Now().Add(30 * time.Second)
			for {
				_, err := dyn.Resource(gvr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{})
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("plane %s: %w", plane, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	return nil
}
