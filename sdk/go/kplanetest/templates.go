package kplanetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// CRDTemplateLabel marks a template plane kplanetest made to hold a set of
// CRDs; its value is the digest in the plane's name.
const CRDTemplateLabel = "kplanetest.kplane.dev/crds"

// crdTemplatePrefix starts the name of a CRD template plane; a digest of
// the CRDs' content follows, so every Env (and every test binary attached
// to the same server) with the same CRDs shares one template.
const crdTemplatePrefix = "kplanetest-crds-"

// crdTemplates builds one template plane per distinct set of CRDs, once
// per Env however many tests ask at the same time. A plane made from it
// (spec.template) inherits the CRDs instead of installing them: its
// creation writes its Plane and nothing else.
type crdTemplates struct {
	mu     sync.Mutex
	builds map[string]*templateBuild // by template plane id
}

// templateBuild is one template's creation; waiters block on done.
type templateBuild struct {
	done chan struct{}
	err  error
}

// crdTemplateID names the template of crds: a digest of their content,
// independent of their order.
func crdTemplateID(crds []*unstructured.Unstructured) (string, error) {
	docs := make([]string, 0, len(crds))
	for _, crd := range crds {
		// encoding/json sorts map keys: the same CRD gives the same bytes.
		data, err := json.Marshal(crd.Object)
		if err != nil {
			return "", fmt.Errorf("encoding CRD %s: %w", crd.GetName(), err)
		}
		docs = append(docs, string(data))
	}
	sort.Strings(docs)
	sum := sha256.New()
	for _, d := range docs {
		sum.Write([]byte(d))
		sum.Write([]byte{0})
	}
	return crdTemplatePrefix + hex.EncodeToString(sum.Sum(nil))[:16], nil
}

// crdTemplate returns the id of the template plane holding crds, creating
// it (CRDs Established and served) on first use. Concurrent callers wait
// for the one creation; a failed creation is tried again by the next
// caller.
func (e *Env) crdTemplate(ctx context.Context, crds []*unstructured.Unstructured) (string, error) {
	id, err := crdTemplateID(crds)
	if err != nil {
		return "", err
	}
	e.templates.mu.Lock()
	b, ok := e.templates.builds[id]
	if !ok {
		b = &templateBuild{done: make(chan struct{})}
		e.templates.builds[id] = b
	}
	e.templates.mu.Unlock()
	if ok {
		select {
		case <-b.done:
		case <-ctx.Done():
			return "", fmt.Errorf("kplanetest: waiting for CRD template %s: %w", id, ctx.Err())
		}
		if b.err != nil {
			return "", b.err
		}
		return id, nil
	}
	b.err = e.buildCRDTemplate(ctx, id, crds)
	if b.err != nil {
		b.err = fmt.Errorf("kplanetest: CRD template %s: %w", id, b.err)
		e.templates.mu.Lock()
		delete(e.templates.builds, id)
		e.templates.mu.Unlock()
	}
	close(b.done)
	return id, b.err
}

// buildCRDTemplate creates template plane id with crds and waits until
// they are Established and in its discovery. Another test binary attached
// to the same server may have made it already (AlreadyExists): then it is
// only waited for, and Stop leaves it to the Env that made it (it carries
// that Env's RunLabel).
func (e *Env) buildCRDTemplate(ctx context.Context, id string, crds []*unstructured.Unstructured) error {
	obj := e.planeObject(id, planeSettings{labels: map[string]string{CRDTemplateLabel: id[len(crdTemplatePrefix):]}})
	_, err := e.planes.Create(ctx, obj, metav1.CreateOptions{})
	created := err == nil
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the plane: %w", err)
	}
	cfg := e.planeConfig(id)
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	if created {
		err = installCRDs(ctx, client, disco, crds)
	} else {
		// Someone else's: it may already have members, so it is read-only
		// (403 on writes); it is complete once its CRDs are served.
		err = errors.Join(waitEstablished(ctx, client.Resource(crdGVR), crds), waitServed(ctx, disco, crds))
	}
	if err != nil && created {
		delCtx, cancel := context.WithTimeout(context.Background(), PlaneTimeout)
		defer cancel()
		err = errors.Join(err, e.deletePlane(delCtx, id, true))
	}
	return err
}

// planeConfig is the admin config of plane id.
func (e *Env) planeConfig(id string) *rest.Config {
	cfg := rest.CopyConfig(e.admin)
	cfg.Host = e.server + "/clusters/" + id + "/control-plane"
	return cfg
}

// isCRDTemplate reports whether a Plane of the run is a CRD template.
func isCRDTemplate(plane *unstructured.Unstructured) bool {
	_, ok := plane.GetLabels()[CRDTemplateLabel]
	return ok
}
