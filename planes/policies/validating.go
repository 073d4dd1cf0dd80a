package policies

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"

	planestorage "kplane.dev/kplane/planes/storage"
)

// ValidatingPluginName replaces upstream's ValidatingAdmissionPolicy.
const ValidatingPluginName = "kplane.dev/ValidatingAdmissionPolicy"

// Validating is upstream's ValidatingAdmissionPolicy admission in the plane
// of each request: the plane's policies, bindings and params, upstream's
// dispatcher (matching, params, CEL with its cost limits, validation
// actions, audit annotations, warnings, failure policy and messages).
type Validating struct {
	common
	source *hookSource[*validating.Policy, *validating.PolicyBinding, validating.Validator]
}

var _ admission.ValidationInterface = &Validating{}

func newValidating(registry *planestorage.Registry, resolver func() KindResolver) *Validating {
	return &Validating{
		common: newCommon(registry, admission.Connect, admission.Create, admission.Delete, admission.Update),
		source: newHookSource(registry,
			admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies"),
			admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicybindings"),
			func(b *validating.PolicyBinding) string { return b.Spec.PolicyName },
			func(p *validating.Policy) *paramKindRef {
				if k := p.Spec.ParamKind; k != nil {
					return &paramKindRef{apiVersion: k.APIVersion, kind: k.Kind}
				}
				return nil
			},
			compileValidating, resolver),
	}
}

// Factory returns an admission.Factory that always yields p.
func (p *Validating) Factory() admission.Factory { return factory(p) }

// Validate dispatches the request to the policies of its plane.
func (p *Validating) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
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

// dispatcher is upstream's dispatcher over plane's namespaces: a few
// small structs, made per request rather than kept per plane.
func (p *Validating) dispatcher(plane string) generic.Dispatcher[validating.PolicyHook] {
	return validating.NewDispatcher(p.authorizer, generic.NewPolicyMatcher(p.matcher(plane)))
}
