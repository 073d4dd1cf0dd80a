package admission

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	api "k8s.io/kubernetes/pkg/apis/core"
)

// NamespaceLifecyclePluginName is the name kplane registers its plane-aware
// NamespaceLifecycle under; it replaces the upstream plugin.
const NamespaceLifecyclePluginName = "kplane.dev/NamespaceLifecycle"

// NamespaceGetter reads a namespace of the plane carried by ctx.
// resourceVersion "0" reads the shared cache, "" reads the datastore.
type NamespaceGetter interface {
	GetNamespace(ctx context.Context, name, resourceVersion string) (*api.Namespace, error)
}

var namespaceKind = schema.GroupKind{Kind: "Namespace"}

// accessReviewResources may be created in any namespace state: answering
// them reveals nothing about the namespace.
var accessReviewResources = sets.New(
	schema.GroupResource{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"},
)

// NamespaceLifecycle is the upstream NamespaceLifecycle admission, evaluated
// in the plane of each request: creating an object in a namespace that does
// not exist or is terminating in that plane is refused, and the immortal
// namespaces cannot be deleted.
type NamespaceLifecycle struct {
	*admission.Handler
	immortal   sets.Set[string]
	namespaces NamespaceGetter
}

var _ admission.MutationInterface = &NamespaceLifecycle{}

// NewNamespaceLifecycle returns the plugin.
func NewNamespaceLifecycle(namespaces NamespaceGetter) *NamespaceLifecycle {
	return &NamespaceLifecycle{
		Handler:    admission.NewHandler(admission.Create, admission.Delete),
		immortal:   sets.New(metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic),
		namespaces: namespaces,
	}
}

// Factory returns an admission.Factory that always yields p.
func (p *NamespaceLifecycle) Factory() admission.Factory {
	return func(io.Reader) (admission.Interface, error) { return p, nil }
}

// Admit implements admission.MutationInterface. Like upstream it is a
// mutating plugin so that it runs, and refuses, before anything else.
func (p *NamespaceLifecycle) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	isNamespace := a.GetKind().GroupKind() == namespaceKind
	if isNamespace {
		if a.GetOperation() == admission.Delete && p.immortal.Has(a.GetName()) {
			return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(), fmt.Errorf("this namespace may not be deleted"))
		}
		return nil
	}
	if a.GetOperation() != admission.Create || a.GetNamespace() == "" {
		return nil
	}
	if accessReviewResources.Has(a.GetResource().GroupResource()) {
		return nil
	}

	ns, err := p.namespaces.GetNamespace(ctx, a.GetNamespace(), "0")
	if apierrors.IsNotFound(err) {
		// The cache may not have seen a namespace created a moment ago; the
		// datastore has the last word before a create is refused.
		ns, err = p.namespaces.GetNamespace(ctx, a.GetNamespace(), "")
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return err
		}
		return apierrors.NewInternalError(err)
	}
	if ns.Status.Phase != api.NamespaceTerminating {
		return nil
	}
	forbidden := admission.NewForbidden(a, fmt.Errorf("unable to create new content in namespace %s because it is being terminated", a.GetNamespace()))
	if statusErr, ok := forbidden.(*apierrors.StatusError); ok {
		statusErr.ErrStatus.Details.Causes = append(statusErr.ErrStatus.Details.Causes, metav1.StatusCause{
			Type:    corev1.NamespaceTerminatingCause,
			Message: fmt.Sprintf("namespace %s is being terminated", a.GetNamespace()),
			Field:   "metadata.namespace",
		})
	}
	return forbidden
}
