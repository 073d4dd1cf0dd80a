// Package webhook holds the RayServe admission webhooks: defaulting pins
// an untagged image to DefaultImageTag, validation keeps the port fixed
// once created and serve-config keys to YAML file names. The conversion
// webhook is controller-runtime's, from the API versions' Hub and
// Convertible methods.
package webhook

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	servingv1alpha1 "kplane.dev/kplane/examples/rayserve-operator/api/v1alpha1"
	servingv1beta1 "kplane.dev/kplane/examples/rayserve-operator/api/v1beta1"
)

// DefaultImageTag is the tag an untagged image is given.
const DefaultImageTag = "2.40.0"

// Setup registers the defaulting, validating and conversion webhooks with
// the manager's webhook server.
func Setup(mgr ctrl.Manager) error {
	err := ctrl.NewWebhookManagedBy(mgr, &servingv1alpha1.RayServe{}).
		WithDefaulter(defaulter{}).
		WithValidator(validator{}).
		Complete()
	if err != nil {
		return err
	}
	// The spoke version is registered for its conversion only.
	return ctrl.NewWebhookManagedBy(mgr, &servingv1beta1.RayServe{}).Complete()
}

// +kubebuilder:webhook:path=/mutate-serving-example-com-v1alpha1-rayserve,mutating=true,failurePolicy=fail,sideEffects=None,groups=serving.example.com,resources=rayserves,verbs=create;update,versions=v1alpha1,name=mrayserve-v1alpha1.kb.io,admissionReviewVersions=v1

type defaulter struct{}

// Default pins an untagged image: "rayproject/ray" would otherwise roll
// to whatever latest is on every node that pulls it.
func (defaulter) Default(_ context.Context, rs *servingv1alpha1.RayServe) error {
	if !hasTagOrDigest(rs.Spec.Image) {
		rs.Spec.Image += ":" + DefaultImageTag
	}
	return nil
}

func hasTagOrDigest(image string) bool {
	if strings.Contains(image, "@") {
		return true
	}
	// A colon after the last slash is a tag; one before it is a
	// registry's port.
	return strings.Contains(image[strings.LastIndex(image, "/")+1:], ":")
}

// +kubebuilder:webhook:path=/validate-serving-example-com-v1alpha1-rayserve,mutating=false,failurePolicy=fail,sideEffects=None,groups=serving.example.com,resources=rayserves,verbs=create;update,versions=v1alpha1,name=vrayserve-v1alpha1.kb.io,admissionReviewVersions=v1

type validator struct{}

var groupKind = schema.GroupKind{Group: servingv1alpha1.GroupVersion.Group, Kind: "RayServe"}

func (validator) ValidateCreate(_ context.Context, rs *servingv1alpha1.RayServe) (admission.Warnings, error) {
	return nil, invalid(rs, validateServeConfig(rs))
}

// ValidateUpdate keeps the port: clients found the server through it.
func (validator) ValidateUpdate(_ context.Context, old, rs *servingv1alpha1.RayServe) (admission.Warnings, error) {
	errs := validateServeConfig(rs)
	if old.Spec.Port != rs.Spec.Port {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "port"), fmt.Sprintf("the port cannot change once set (it is %d)", old.Spec.Port)))
	}
	return nil, invalid(rs, errs)
}

func (validator) ValidateDelete(context.Context, *servingv1alpha1.RayServe) (admission.Warnings, error) {
	return nil, nil
}

func validateServeConfig(rs *servingv1alpha1.RayServe) field.ErrorList {
	var errs field.ErrorList
	for key := range rs.Spec.ServeConfig {
		if !strings.HasSuffix(key, ".yaml") {
			errs = append(errs, field.Invalid(field.NewPath("spec", "serveConfig").Key(key), key, "keys name YAML files (*.yaml)"))
		}
	}
	return errs
}

func invalid(rs *servingv1alpha1.RayServe, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(groupKind, rs.Name, errs)
}
