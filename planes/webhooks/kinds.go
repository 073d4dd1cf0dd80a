package webhooks

import (
	"context"
	"fmt"
	"io"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
)

// The names kplane registers its plane-aware webhook plugins under; they
// take the place of upstream's.
const (
	ValidatingPluginName = "kplane.dev/ValidatingAdmissionWebhook"
	MutatingPluginName   = "kplane.dev/MutatingAdmissionWebhook"
)

// Validating is upstream's ValidatingAdmissionWebhook for every plane.
type Validating struct{ *Plugin }

// Mutating is upstream's MutatingAdmissionWebhook for every plane.
type Mutating struct{ *Plugin }

var (
	_ admission.ValidationInterface = Validating{}
	_ admission.MutationInterface   = Mutating{}
)

// NewValidating returns the validating plugin.
func NewValidating(config Config) Validating {
	return Validating{newPlugin(kind{
		name:     ValidatingPluginName,
		resource: admissionregistrationv1.Resource("validatingwebhookconfigurations"),
		newUpstream: func() (upstreamPlugin, error) {
			return validating.NewValidatingAdmissionWebhook(nil)
		},
		hold: func(f *planeInformers, items []runtime.Object) error {
			for _, item := range items {
				c, err := external(item, &admissionregistrationv1.ValidatingWebhookConfiguration{})
				if err != nil {
					return err
				}
				f.validating = append(f.validating, c)
			}
			return nil
		},
	}, config)}
}

// NewMutating returns the mutating plugin.
func NewMutating(config Config) Mutating {
	return Mutating{newPlugin(kind{
		name:     MutatingPluginName,
		resource: admissionregistrationv1.Resource("mutatingwebhookconfigurations"),
		newUpstream: func() (upstreamPlugin, error) {
			return mutating.NewMutatingWebhook(nil)
		},
		hold: func(f *planeInformers, items []runtime.Object) error {
			for _, item := range items {
				c, err := external(item, &admissionregistrationv1.MutatingWebhookConfiguration{})
				if err != nil {
					return err
				}
				f.mutating = append(f.mutating, c)
			}
			return nil
		},
	}, config)}
}

// Factory returns an admission.Factory that always yields v.
func (v Validating) Factory() admission.Factory {
	return func(io.Reader) (admission.Interface, error) { return v, nil }
}

// Factory returns an admission.Factory that always yields m.
func (m Mutating) Factory() admission.Factory {
	return func(io.Reader) (admission.Interface, error) { return m, nil }
}

// Validate calls the validating webhooks of the request's plane.
func (v Validating) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	return v.dispatch(ctx, a, func(up upstreamPlugin) error {
		validator, ok := up.(admission.ValidationInterface)
		if !ok {
			return fmt.Errorf("%T does not validate", up)
		}
		return validator.Validate(ctx, a, o)
	})
}

// Admit calls the mutating webhooks of the request's plane.
func (m Mutating) Admit(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	return m.dispatch(ctx, a, func(up upstreamPlugin) error {
		mutator, ok := up.(admission.MutationInterface)
		if !ok {
			return fmt.Errorf("%T does not mutate", up)
		}
		return mutator.Admit(ctx, a, o)
	})
}
