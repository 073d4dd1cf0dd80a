package policies

import (
	"context"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"

	planestorage "kplane.dev/kplane/planes/storage"
)

// MutatingPluginName replaces upstream's MutatingAdmissionPolicy.
const MutatingPluginName = "kplane.dev/MutatingAdmissionPolicy"

// Mutating is upstream's MutatingAdmissionPolicy admission in the plane of
// each request: the plane's policies, bindings and params, upstream's
// dispatcher (JSONPatch and ApplyConfiguration, reinvocation, failure
// policy).
type Mutating struct {
	common
	source *hookSource[*mutating.Policy, *mutating.PolicyBinding, mutating.PolicyEvaluator]
	types  *typeConverters
}

var _ admission.MutationInterface = &Mutating{}

func newMutating(registry *planestorage.Registry, resolver func() KindResolver) *Mutating {
	return &Mutating{
		common: newCommon(registry, admission.Create, admission.Update, admission.Connect),
		source: newHookSource(registry,
			admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingadmissionpolicies"),
			admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingadmissionpolicybindings"),
			func(b *mutating.PolicyBinding) string { return b.Spec.PolicyName },
			func(p *mutating.Policy) *paramKindRef {
				if k := p.Spec.ParamKind; k != nil {
					return &paramKindRef{apiVersion: k.APIVersion, kind: k.Kind}
				}
				return nil
			},
			compileMutating, resolver),
		types: &typeConverters{},
	}
}

// Factory returns an admission.Factory that always yields p.
func (p *Mutating) Factory() admission.Factory { return factory(p) }

// SetStaticTypeConverter gives the built-in types' structure to
// ApplyConfiguration mutations (lists merged by key, as upstream). It is
// built on first use: tens of MiB a server without mutating policies
// does not need.
func (p *Mutating) SetStaticTypeConverter(build func() (managedfields.TypeConverter, error)) {
	p.types.build = build
}

// Admit dispatches the request to the mutating policies of its plane.
func (p *Mutating) Admit(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	if p.skip(a) {
		return nil
	}
	plane, err := planeOf(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	hooks, err := p.source.Hooks(ctx, plane)
	if err != nil {
		return admission.NewForbidden(a, fmt.Errorf("not yet ready to handle request: %w", err))
	}
	if len(hooks) == 0 {
		return nil
	}
	return p.dispatcher(plane).Dispatch(ctx, a, o, hooks)
}

// dispatcher is upstream's dispatcher over plane's namespaces, made per
// request. It is never started: its only background work is upstream's
// polling of OpenAPI, which typeConverters does not need.
func (p *Mutating) dispatcher(plane string) generic.Dispatcher[mutating.PolicyHook] {
	return mutating.NewDispatcher(p.authorizer, p.matcher(plane), p.types)
}

// typeConverters give ApplyConfiguration the structure of the object it
// merges into: the built-in types' from the server's OpenAPI models, a
// custom resource's deduced from the object itself (upstream asks the
// plane's OpenAPI for a CRD's schema; here lists of custom resources are
// replaced, not merged by key).
type typeConverters struct {
	build  func() (managedfields.TypeConverter, error)
	once   sync.Once
	static managedfields.TypeConverter
}

func (t *typeConverters) builtin() managedfields.TypeConverter {
	t.once.Do(func() {
		if t.build == nil {
			return
		}
		static, err := t.build()
		if err != nil {
			logrus.WithError(err).Warn("admission policies: no type converter for built-in kinds; ApplyConfiguration deduces their structure")
			return
		}
		t.static = static
	})
	return t.static
}

func (t *typeConverters) GetTypeConverter(gvk schema.GroupVersionKind) managedfields.TypeConverter {
	if static := t.builtin(); static != nil {
		stub := &unstructured.Unstructured{}
		stub.SetGroupVersionKind(gvk)
		if _, err := static.ObjectToTyped(stub); err == nil {
			return static
		}
	}
	return managedfields.NewDeducedTypeConverter()
}

func (t *typeConverters) Run(context.Context) {}
