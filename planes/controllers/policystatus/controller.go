package policystatus

import (
	"context"
	"fmt"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/apiserver/pkg/storage"
	applyv1 "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/admissionregistration"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/loopback"
	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/planes/workers"
)

// ControllerName is upstream's field manager of the status.
const ControllerName = "validatingadmissionpolicy-status-controller"

var policies = admissionregistrationv1.Resource("validatingadmissionpolicies")

// Kinds tells the kind of a resource a plane serves (built-in or its CRD).
type Kinds interface {
	KindFor(ctx context.Context, plane string, gr schema.GroupResource) (string, bool)
}

// Config is what the controller works with.
type Config struct {
	// Client addresses the plane in each call's context (loopback.Controller).
	Client *rest.Config
	// Loopback reaches the server as itself; a plane's OpenAPI (its CRDs'
	// schemas) is read through it.
	Loopback *rest.Config
	Storage  *planestorage.Registry
	Kinds    Kinds
	// Builtin builds the resolver of the built-in kinds' schemas; it is
	// built on the first policy to check.
	Builtin func() *resolver.DefinitionsSchemaResolver
	Workers int
}

// Key names one policy of a plane.
type Key struct{ Plane, Name string }

// Controller type-checks policies whose generation is newer than their
// status says.
type Controller struct {
	config  Config
	once    sync.Once
	builtin *resolver.DefinitionsSchemaResolver
	client  kubernetes.Interface
	queue   workqueue.TypedRateLimitingInterface[Key]
}

// New returns the controller.
func New(config Config) (*Controller, error) {
	client, err := kubernetes.NewForConfig(config.Client)
	if err != nil {
		return nil, fmt.Errorf("policy status client: %w", err)
	}
	if config.Workers == 0 {
		config.Workers = 2
	}
	return &Controller{config: config, client: client, queue: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[Key](),
		workqueue.TypedRateLimitingQueueConfig[Key]{Name: ControllerName})}, nil
}

// Wants implements controllers.Subscriber.
func (c *Controller) Wants(r schema.GroupResource) bool { return r == policies }

// Upsert implements controllers.Subscriber: a policy whose status is
// behind its generation is checked, as upstream.
func (c *Controller) Upsert(_ schema.GroupResource, obj runtime.Object) {
	policy, ok := obj.(*admissionregistration.ValidatingAdmissionPolicy)
	if !ok || policy.Generation <= policy.Status.ObservedGeneration {
		return
	}
	c.queue.Add(Key{Plane: planes.OfObject(obj), Name: policy.Name})
}

// Delete implements controllers.Subscriber.
func (c *Controller) Delete(schema.GroupResource, runtime.Object) {}

// Run processes policies until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	workers.Run(ctx, c.queue, c.config.Workers, "admission policy status", c.syncKey)
}

// syncKey syncs one policy's status; a policy or plane that is gone has
// nothing left to sync.
func (c *Controller) syncKey(ctx context.Context, key Key) error {
	err := c.sync(planes.WithPlane(ctx, key.Plane), key)
	if apierrors.IsNotFound(err) || lifecycle.Refused(err) {
		return nil
	}
	return err
}

// sync is upstream's reconcile: check the policy as it is now, apply the
// warnings and the generation they are for.
func (c *Controller) sync(ctx context.Context, key Key) error {
	policy, err := c.read(ctx, key)
	if err != nil || policy.Generation <= policy.Status.ObservedGeneration {
		return err
	}
	checker := &validating.TypeChecker{SchemaResolver: c.schemas(key.Plane), RestMapper: planeKinds{ctx: ctx, plane: key.Plane, kinds: c.config.Kinds}}
	warnings := checker.Check(policy)
	configs := make([]*applyv1.ExpressionWarningApplyConfiguration, 0, len(warnings))
	for _, w := range warnings {
		configs = append(configs, applyv1.ExpressionWarning().WithFieldRef(w.FieldRef).WithWarning(w.Warning))
	}
	apply := applyv1.ValidatingAdmissionPolicy(policy.Name).WithStatus(applyv1.ValidatingAdmissionPolicyStatus().
		WithObservedGeneration(policy.Generation).
		WithTypeChecking(applyv1.TypeChecking().WithExpressionWarnings(configs...)))
	_, err = c.client.AdmissionregistrationV1().ValidatingAdmissionPolicies().ApplyStatus(ctx, apply,
		metav1.ApplyOptions{FieldManager: ControllerName, Force: true})
	return err
}

// read returns the policy from the shared cache, at v1.
func (c *Controller) read(ctx context.Context, key Key) (*admissionregistrationv1.ValidatingAdmissionPolicy, error) {
	s := c.config.Storage.Storage(policies)
	if s == nil {
		return nil, fmt.Errorf("%s are not served yet", policies)
	}
	internal := s.New()
	if err := s.Get(ctx, s.ResourcePrefix()+"/"+key.Name, storage.GetOptions{ResourceVersion: "0"}, internal); err != nil {
		if storage.IsNotFound(err) {
			return nil, apierrors.NewNotFound(policies, key.Name)
		}
		return nil, err
	}
	out := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := legacyscheme.Scheme.Convert(internal, out, nil); err != nil {
		return nil, fmt.Errorf("converting policy %s of plane %s: %w", key.Name, key.Plane, err)
	}
	return out, nil
}

// schemas resolves the built-in kinds' schemas, and the plane's custom
// resources' from its OpenAPI, as upstream combines them.
func (c *Controller) schemas(plane string) resolver.SchemaResolver {
	c.once.Do(func() { c.builtin = c.config.Builtin() })
	if c.config.Loopback == nil {
		return c.builtin
	}
	client, err := discovery.NewDiscoveryClientForConfig(loopback.ForPlane(c.config.Loopback, plane))
	if err != nil {
		return c.builtin
	}
	return c.builtin.Combine(&resolver.ClientDiscoveryResolver{Discovery: client})
}

// planeKinds is the one question upstream's type checker asks a
// RESTMapper (KindsFor), answered for one plane.
type planeKinds struct {
	meta.RESTMapper
	ctx   context.Context
	plane string
	kinds Kinds
}

func (m planeKinds) KindsFor(gvr schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	kind, ok := m.kinds.KindFor(m.ctx, m.plane, gvr.GroupResource())
	if !ok {
		return nil, &meta.NoResourceMatchError{PartialResource: gvr}
	}
	return []schema.GroupVersionKind{gvr.GroupVersion().WithKind(kind)}, nil
}
