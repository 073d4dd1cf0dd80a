package kplanetest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// PlaneTimeout bounds the creation of one plane (its CRDs Established
// included) and, separately, its deletion.
const PlaneTimeout = 2 * time.Minute

// PlaneHandle is a plane an Env created.
type PlaneHandle struct {
	// ID is the plane id: its URL is <server>/clusters/<ID>/control-plane.
	ID string
	// Config is an admin client config of the plane (cluster-admin there).
	Config *rest.Config
	// Webhook is where the test serves the plane's webhooks (WithWebhooks),
	// nil without them.
	Webhook *WebhookServer
	env     *Env
}

// PlaneOption changes one plane of NewPlane or CreatePlane.
type PlaneOption func(*planeSettings) error

type planeSettings struct {
	test     string
	template string
	labels   map[string]string
	crds     []*unstructured.Unstructured
	webhooks *planeWebhooks
	// apiOnly turns the server's workload simulation off in the plane.
	apiOnly bool
	// simulation is the plane's spec.simulation (nil: the server's).
	simulation *Simulation
}

// WithTemplate starts the plane from template plane id: the Plane's
// spec.template (the server's templates; a server without them refuses or
// ignores the field, as it does any unknown field).
func WithTemplate(id string) PlaneOption {
	return func(s *planeSettings) error { s.template = id; return nil }
}

// WithCRDDirectoryPaths installs the CRDs of these paths in this plane too
// (read as Options.CRDDirectoryPaths, missing paths are an error).
func WithCRDDirectoryPaths(paths ...string) PlaneOption {
	return func(s *planeSettings) error {
		crds, err := readCRDs(paths, true)
		s.crds = append(s.crds, crds...)
		return err
	}
}

// WithCRDs installs these CustomResourceDefinitions in this plane too.
func WithCRDs(crds ...*unstructured.Unstructured) PlaneOption {
	return func(s *planeSettings) error { s.crds = append(s.crds, crds...); return nil }
}

// WithLabels adds labels to the Plane object.
func WithLabels(labels map[string]string) PlaneOption {
	return func(s *planeSettings) error {
		for k, v := range labels {
			s.labels[k] = v
		}
		return nil
	}
}

// simulationAnnotation on a Plane set to "false" leaves the plane an API
// only (the server's simulation.PlaneAnnotation).
const simulationAnnotation = "kplane.dev/simulation"

// WithoutSimulation makes a plane in which no workload controller,
// scheduler or simulated kubelet acts: Deployments get no Pods and their
// status is what the test writes, as on envtest. Set at creation, so no
// controller ever acts on the plane (a later change would race with them).
func WithoutSimulation() PlaneOption {
	return func(s *planeSettings) error { s.apiOnly = true; return nil }
}

// NewPlane creates a plane for t, installs the Env's CRDs (and the
// options') and returns its admin client config once they are
// Established. t.Cleanup deletes the plane, also when t fails or panics
// (and waits until it is gone with Options.WaitForDeletion).
func (e *Env) NewPlane(t testing.TB, opts ...PlaneOption) *rest.Config {
	t.Helper()
	return e.NewPlaneHandle(t, opts...).Config
}

// NewPlaneHandle is NewPlane returning the plane's id along with its
// config.
func (e *Env) NewPlaneHandle(t testing.TB, opts ...PlaneOption) *PlaneHandle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), PlaneTimeout)
	defer cancel()
	opts = append([]PlaneOption{func(s *planeSettings) error { s.test = t.Name(); return nil }}, opts...)
	p, err := e.CreatePlane(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The server finishes the deletion on its own; Stop waits until
		// every plane of the run is gone.
		ctx, cancel := context.WithTimeout(context.Background(), PlaneTimeout)
		defer cancel()
		if err := e.deletePlane(ctx, p.ID, e.waitForDeletion); err != nil {
			t.Errorf("kplanetest: %v", err)
		}
	})
	return p
}

// CreatePlane creates a plane and installs the Env's CRDs and the
// options' in it. The caller deletes it (PlaneHandle.Delete); Env.Stop
// deletes what is left. On error nothing is left behind.
func (e *Env) CreatePlane(ctx context.Context, opts ...PlaneOption) (*PlaneHandle, error) {
	s := planeSettings{labels: map[string]string{}}
	for _, opt := range opts {
		if err := opt(&s); err != nil {
			return nil, fmt.Errorf("kplanetest: %w", err)
		}
	}
	// A plane made ahead of time fits unless the options ask for more
	// than the Env's CRDs.
	if s.template == "" && len(s.crds) == 0 && len(s.labels) == 0 && s.webhooks == nil && !s.apiOnly && s.simulation == nil {
		if p := e.pool.take(); p != nil {
			return p, nil
		}
	}
	return e.createPlane(ctx, s)
}

func (e *Env) createPlane(ctx context.Context, s planeSettings) (*PlaneHandle, error) {
	crds := append(append([]*unstructured.Unstructured{}, e.crds...), s.crds...)
	p := &PlaneHandle{ID: e.planeID(s.test), env: e}
	if s.webhooks != nil {
		var err error
		if p.Webhook, err = e.newWebhookServer(); err != nil {
			return nil, err
		}
		if crds, err = s.webhooks.convertedCRDs(crds, p.Webhook); err != nil {
			return nil, err
		}
	}
	// Inherited CRDs need only to be served; a template of the caller's
	// own wins, and the CRDs are installed over it. CRDs converted by the
	// test's own server are the plane's own.
	inherited := false
	if len(crds) > 0 && s.template == "" && e.crdTemplating && s.webhooks == nil {
		template, err := e.crdTemplate(ctx, crds)
		if err != nil {
			return nil, err
		}
		s.template, inherited = template, true
	}
	// Strict: a server that does not know a field (spec.template before
	// templates) refuses it by name instead of dropping it silently.
	strict := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
	if _, err := e.planes.Create(ctx, e.planeObject(p.ID, s), strict); err != nil {
		return nil, fmt.Errorf("kplanetest: creating plane %s: %w", p.ID, err)
	}
	p.Config = e.planeConfig(p.ID)
	err := p.prepare(ctx, crds, inherited)
	if err == nil && s.webhooks != nil {
		err = p.installWebhooks(ctx, s.webhooks)
	}
	if err != nil {
		delCtx, cancel := context.WithTimeout(context.Background(), PlaneTimeout)
		defer cancel()
		return nil, errors.Join(fmt.Errorf("kplanetest: plane %s: %w", p.ID, err), e.deletePlane(delCtx, p.ID, true))
	}
	return p, nil
}

// prepare installs crds (or, inherited from the plane's template, waits
// until the plane serves them), or, without any, makes one request that
// waits for the plane's bootstrap: either way the plane is ready when it
// returns.
func (p *PlaneHandle) prepare(ctx context.Context, crds []*unstructured.Unstructured, inherited bool) error {
	if len(crds) > 0 {
		client, err := dynamic.NewForConfig(p.Config)
		if err != nil {
			return err
		}
		disco, err := discovery.NewDiscoveryClientForConfig(p.Config)
		if err != nil {
			return err
		}
		if inherited {
			return waitServed(ctx, disco, crds)
		}
		return installCRDs(ctx, client, disco, crds)
	}
	client, err := kubernetes.NewForConfig(p.Config)
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
	return err
}

// installWebhooks creates the plane's webhook configurations, pointed at
// its WebhookServer.
func (p *PlaneHandle) installWebhooks(ctx context.Context, hooks *planeWebhooks) error {
	client, err := kubernetes.NewForConfig(p.Config)
	if err != nil {
		return err
	}
	return hooks.install(ctx, client, p.Webhook)
}

func (e *Env) planeObject(id string, s planeSettings) *unstructured.Unstructured {
	labels := map[string]any{RunLabel: e.runID}
	for k, v := range s.labels {
		labels[k] = v
	}
	spec := map[string]any{}
	if s.template != "" {
		spec["template"] = s.template
	}
	if s.simulation != nil {
		spec["simulation"] = s.simulation.object()
	}
	annotations := map[string]any{}
	if s.test != "" {
		annotations[TestAnnotation] = s.test
	}
	if s.apiOnly {
		annotations[simulationAnnotation] = "false"
	}
	meta := map[string]any{"name": id, "labels": labels}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kplane.dev/v1", "kind": "Plane", "metadata": meta, "spec": spec,
	}}
}

var notIDChars = regexp.MustCompile(`[^a-z0-9]+`)

// planeID is a readable, unique plane id: the test's name cut to fit, the
// run id and a sequence number (a DNS-1123 label of at most 63 bytes).
func (e *Env) planeID(test string) string {
	suffix := fmt.Sprintf("%s-%d", e.runID, e.seq.Add(1))
	name := strings.Trim(notIDChars.ReplaceAllString(strings.ToLower(test), "-"), "-")
	if max := 63 - len(suffix) - 1; len(name) > max {
		name = strings.TrimRight(name[:max], "-")
	}
	if name == "" {
		name = "plane"
	}
	return name + "-" + suffix
}

// Delete deletes the plane and everything in it and waits until it is
// gone.
func (p *PlaneHandle) Delete(ctx context.Context) error {
	return p.env.deletePlane(ctx, p.ID, true)
}

// conflictBackoff paces the retries of a deletion answered 409: a template
// plane refuses it while planes made from it exist, and for a moment after
// the last one is gone.
var conflictBackoff = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 1.5, Jitter: 0.1, Steps: 40, Cap: 2 * time.Second}

// deletePlane deletes plane id and, with wait, waits until it is gone.
func (e *Env) deletePlane(ctx context.Context, id string, waitGone bool) error {
	var err error
	_ = wait.ExponentialBackoffWithContext(ctx, conflictBackoff, func(ctx context.Context) (bool, error) {
		err = e.planes.Delete(ctx, id, metav1.DeleteOptions{})
		return !apierrors.IsConflict(err), nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting plane %s: %w", id, err)
	}
	if !waitGone {
		return nil
	}
	return e.waitGone(ctx, id)
}

func (e *Env) waitGone(ctx context.Context, id string) error {
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, PlaneTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := e.planes.Get(ctx, id, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("plane %s is not gone: %w", id, err)
	}
	return nil
}

func listByRun(runID string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: RunLabel + "=" + runID}
}
