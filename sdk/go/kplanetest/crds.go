package kplanetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// readCRDs reads the CustomResourceDefinitions in paths: directories
// (their *.yaml, *.yml and *.json files, not recursively, as envtest) or
// single files. Documents of other kinds are an error: a typo would
// otherwise leave a CRD out silently.
func readCRDs(paths []string, errorIfMissing bool) ([]*unstructured.Unstructured, error) {
	var crds []*unstructured.Unstructured
	for _, path := range paths {
		files, err := crdFiles(path)
		if errors.Is(err, os.ErrNotExist) && !errorIfMissing {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kplanetest: CRD path %s: %w", path, err)
		}
		for _, file := range files {
			objs, err := readManifests(file)
			if err != nil {
				return nil, fmt.Errorf("kplanetest: %s: %w", file, err)
			}
			for _, obj := range objs {
				if obj.GroupVersionKind() != crdGVR.GroupVersion().WithKind("CustomResourceDefinition") {
					return nil, fmt.Errorf("kplanetest: %s: %s %q is not an apiextensions.k8s.io/v1 CustomResourceDefinition",
						file, obj.GetKind(), obj.GetName())
				}
				crds = append(crds, obj)
			}
		}
	}
	return crds, nil
}

func crdFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	sort.Strings(files)
	return files, nil
}

func readManifests(file string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		err := decoder.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// installCRDs creates crds in the plane client talks to and waits until
// every one is Established. A CRD the plane already has (from a template)
// is left as it is.
func installCRDs(ctx context.Context, client dynamic.Interface, disco discovery.DiscoveryInterface, crds []*unstructured.Unstructured) error {
	resource := client.Resource(crdGVR)
	errs := make([]error, len(crds))
	var wg sync.WaitGroup
	for i, crd := range crds {
		wg.Go(func() {
			_, err := resource.Create(ctx, crd.DeepCopy(), metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				errs[i] = fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := waitEstablished(ctx, resource, crds); err != nil {
		return err
	}
	return waitServed(ctx, disco, crds)
}

// waitServed polls discovery until every served version of every CRD
// lists its resource: a client sees Established through its own watch,
// possibly before the server's handlers have caught up with the CRD (as
// envtest, which polls discovery the same way).
func waitServed(ctx context.Context, disco discovery.DiscoveryInterface, crds []*unstructured.Unstructured) error {
	want := map[string][]string{} // group/version -> plurals
	for _, crd := range crds {
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		for _, v := range versions {
			version, _ := v.(map[string]any)
			if served, _ := version["served"].(bool); served {
				gv := group + "/" + fmt.Sprint(version["name"])
				want[gv] = append(want[gv], plural)
			}
		}
	}
	for gv, plurals := range want {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, PlaneTimeout, true, func(ctx context.Context) (bool, error) {
			last = servesAll(disco, gv, plurals)
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("CRDs not served in %s: %v (%w)", gv, last, err)
		}
	}
	return nil
}

func servesAll(disco discovery.DiscoveryInterface, gv string, plurals []string) error {
	list, err := disco.ServerResourcesForGroupVersion(gv)
	if err != nil {
		return err
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	for _, p := range plurals {
		if !served[p] {
			return fmt.Errorf("%s not in discovery yet", p)
		}
	}
	return nil
}

// waitEstablished lists the CRDs and, while some are not Established yet,
// watches from the list's resourceVersion, so no status change is missed.
func waitEstablished(ctx context.Context, resource dynamic.ResourceInterface, crds []*unstructured.Unstructured) error {
	pending := map[string]bool{}
	for _, crd := range crds {
		pending[crd.GetName()] = true
	}
	list, err := resource.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing CRDs: %w", err)
	}
	for i := range list.Items {
		if established(&list.Items[i]) {
			delete(pending, list.Items[i].GetName())
		}
	}
	if len(pending) == 0 {
		return nil
	}
	w, err := resource.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), AllowWatchBookmarks: true})
	if err != nil {
		return fmt.Errorf("watching CRDs: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRDs not Established: %s: %w", names(pending), ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("CRDs not Established: %s: the watch ended", names(pending))
			}
			obj, isObj := ev.Object.(*unstructured.Unstructured)
			if ev.Type == watch.Error || !isObj {
				return fmt.Errorf("CRDs not Established: %s: watch error %v", names(pending), ev.Object)
			}
			if (ev.Type == watch.Added || ev.Type == watch.Modified) && established(obj) {
				delete(pending, obj.GetName())
				if len(pending) == 0 {
					return nil
				}
			}
		}
	}
}

func established(crd *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func names(set map[string]bool) string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
