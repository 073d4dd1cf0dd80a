package autoapply

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/loopback"
)

// fileWork is one file being applied in a pass.
type fileWork struct {
	path string
	// name is path relative to the manifests directory, for messages.
	name string
	hash [sha256.Size]byte
	docs []document
	errs []error
	// quiet: the caller reports (the CLI), the server's log does not.
	quiet bool
}

func (w *fileWork) log(d document) *logrus.Entry {
	name := d.obj.GetName()
	if ns := d.obj.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	return logrus.WithFields(logrus.Fields{
		"file": w.name, "document": d.index, "plane": d.plane, "kind": d.obj.GetKind(), "name": name,
	})
}

func (w *fileWork) applied(d document) {
	if !w.quiet {
		w.log(d).Info("manifest object applied")
	}
}

func (w *fileWork) fail(d document, err error) {
	if !w.quiet {
		w.log(d).WithError(err).Error("manifest object not applied")
	}
	w.errs = append(w.errs, fmt.Errorf("document %d (%s %s in plane %s): %w", d.index, d.obj.GetKind(), d.obj.GetName(), d.plane, err))
}

// apply applies every document of work, in order. Objects whose kind the
// plane does not serve yet wait, when the pass applied a CRD to that
// plane, until the plane serves it.
func (a *Applier) apply(ctx context.Context, work []*fileWork) {
	type waiting struct {
		work *fileWork
		doc  document
		err  error
	}
	a.targets.reset()
	planeErrs := map[string]error{}
	definedKinds := map[string]bool{}
	var pending []waiting
	for _, w := range work {
		for _, d := range w.docs {
			err, checked := planeErrs[d.plane]
			if !checked {
				err = a.targets.ensurePlane(ctx, d.plane)
				planeErrs[d.plane] = err
			}
			if err == nil {
				err = a.targets.apply(ctx, d)
			}
			var noKind *noKindError
			switch {
			case errors.As(err, &noKind):
				pending = append(pending, waiting{w, d, err})
			case err != nil:
				w.fail(d, err)
			default:
				w.applied(d)
				if isCRD(d.obj) {
					definedKinds[d.plane] = true
				}
			}
		}
	}
	deadline := time.Now().Add(a.config.WaitTimeout)
	for len(pending) > 0 {
		var still []waiting
		for _, p := range pending {
			if !definedKinds[p.doc.plane] {
				p.work.fail(p.doc, p.err)
				continue
			}
			err := a.targets.apply(ctx, p.doc)
			var noKind *noKindError
			switch {
			case errors.As(err, &noKind) && time.Now().Before(deadline):
				still = append(still, waiting{p.work, p.doc, err})
			case err != nil:
				p.work.fail(p.doc, err)
			default:
				p.work.applied(p.doc)
			}
		}
		pending = still
		if len(pending) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			for _, p := range pending {
				p.work.fail(p.doc, ctx.Err())
			}
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func isCRD(obj *unstructured.Unstructured) bool {
	gvk := obj.GroupVersionKind()
	return gvk.Group == "apiextensions.k8s.io" && gvk.Kind == "CustomResourceDefinition"
}

// noKindError: the plane does not serve the object's kind (yet).
type noKindError struct {
	plane string
	err   error
}

func (e *noKindError) Error() string {
	return fmt.Sprintf("plane %s does not serve this kind: %v", e.plane, e.err)
}

func (e *noKindError) Unwrap() error { return e.err }

// targets holds a client and a discovery-backed RESTMapper per plane.
type targets struct {
	loopback *rest.Config
	planes   dynamic.NamespaceableResourceInterface
	timeout  time.Duration
	byPlane  map[string]*target
}

type target struct {
	client dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newTargets(config *rest.Config, timeout time.Duration) (*targets, error) {
	if config == nil {
		return nil, fmt.Errorf("no loopback client config")
	}
	config = rest.CopyConfig(config)
	config.Timeout = timeout
	root, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &targets{loopback: config, planes: root.Resource(lifecycle.GVR), timeout: timeout, byPlane: map[string]*target{}}, nil
}

func (t *targets) get(plane string) (*target, error) {
	if tg := t.byPlane[plane]; tg != nil {
		return tg, nil
	}
	config := loopback.ForPlane(t.loopback, plane)
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, err
	}
	tg := &target{client: client, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}
	t.byPlane[plane] = tg
	return tg, nil
}

// reset forgets what discovery said: a pass starts from what the planes
// serve now (a plane may have been deleted and created again since).
func (t *targets) reset() {
	for _, tg := range t.byPlane {
		tg.mapper.Reset()
	}
}

// ensurePlane creates plane through its Plane object if it does not exist
// and waits until it is ready.
func (t *targets) ensurePlane(ctx context.Context, plane string) error {
	if plane == planes.Root {
		return nil
	}
	p, err := t.planes.Get(ctx, plane, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj := lifecycle.NewPlane(plane)
		obj.Annotations = map[string]string{lifecycle.CreatedByAnnotation: FieldManager}
		p, err = t.planes.Create(ctx, obj.Unstructured(), metav1.CreateOptions{FieldManager: FieldManager})
		if err == nil {
			logrus.WithField("plane", plane).Info("plane created for manifests")
		} else if apierrors.IsAlreadyExists(err) {
			p, err = t.planes.Get(ctx, plane, metav1.GetOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("plane %s: %w", plane, err)
	}
	if p.GetDeletionTimestamp() != nil {
		return fmt.Errorf("plane %s is being deleted", plane)
	}
	if phaseOf(p) == lifecycle.Ready {
		return nil
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, t.timeout, true, func(ctx context.Context) (bool, error) {
		p, err := t.planes.Get(ctx, plane, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return phaseOf(p) == lifecycle.Ready, nil
	})
	if err != nil {
		return fmt.Errorf("plane %s is not ready after %s", plane, t.timeout)
	}
	return nil
}

func phaseOf(p *unstructured.Unstructured) lifecycle.Phase {
	phase, _, _ := unstructured.NestedString(p.Object, "status", "phase")
	return lifecycle.Phase(phase)
}

// apply server-side applies one object to its plane.
func (t *targets) apply(ctx context.Context, d document) error {
	tg, err := t.get(d.plane)
	if err != nil {
		return err
	}
	gvk := d.obj.GroupVersionKind()
	mapping, err := tg.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// The plane may have started serving the kind since discovery was
		// read (a CRD applied a moment ago).
		tg.mapper.Reset()
		mapping, err = tg.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if meta.IsNoMatchError(err) {
		return &noKindError{plane: d.plane, err: err}
	}
	if err != nil {
		return fmt.Errorf("mapping %s: %w", gvk, err)
	}
	obj := d.obj.DeepCopy()
	var resource dynamic.ResourceInterface
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(metav1.NamespaceDefault)
		}
		resource = tg.client.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	} else {
		// As kubectl does: a namespace on a cluster-scoped object means
		// nothing.
		obj.SetNamespace("")
		resource = tg.client.Resource(mapping.Resource)
	}
	_, err = resource.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	return err
}
