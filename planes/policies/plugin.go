package policies

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// admissionConfigResources are never subject to policies from the API, as
// upstream: a policy could otherwise lock itself in.
var admissionConfigResources = sets.New(
	admissionregistrationv1.Resource("validatingadmissionpolicies"),
	admissionregistrationv1.Resource("validatingadmissionpolicybindings"),
	admissionregistrationv1.Resource("mutatingadmissionpolicies"),
	admissionregistrationv1.Resource("mutatingadmissionpolicybindings"),
)

// Plugins are the two admission plugins (ValidatingAdmissionPolicy,
// MutatingAdmissionPolicy) for every plane.
type Plugins struct {
	Validating *Validating
	Mutating   *Mutating
	resolver   atomic.Pointer[KindResolver]
}

// NewPlugins returns both plugins reading the planes' objects from
// registry. The kind resolver (paramKind) is bound with SetResolver once
// the server's APIs exist.
func NewPlugins(registry *planestorage.Registry) *Plugins {
	p := &Plugins{}
	resolver := func() KindResolver {
		if r := p.resolver.Load(); r != nil {
			return *r
		}
		return nil
	}
	p.Validating = newValidating(registry, resolver)
	p.Mutating = newMutating(registry, resolver)
	return p
}

// SetResolver binds the resolver of paramKinds.
func (p *Plugins) SetResolver(r KindResolver) { p.resolver.Store(&r) }

// ForgetPlane drops what is held for a deleted plane.
func (p *Plugins) ForgetPlane(plane string) {
	p.Validating.source.Forget(plane)
	p.Mutating.source.Forget(plane)
}

// common is what both plugins are given by the admission initializers.
type common struct {
	*admission.Handler
	registry   *planestorage.Registry
	authorizer authorizer.UnconditionalAuthorizer
	excluded   sets.Set[schema.GroupResource]
}

var (
	_ initializer.WantsUnconditionalAuthorizer    = &common{}
	_ initializer.WantsExcludedAdmissionResources = &common{}
)

func newCommon(registry *planestorage.Registry, ops ...admission.Operation) common {
	return common{Handler: admission.NewHandler(ops...), registry: registry, excluded: sets.New[schema.GroupResource]()}
}

// SetUnconditionalAuthorizer implements initializer.WantsUnconditionalAuthorizer:
// CEL's authorizer, which is plane-aware through the request's context.
func (c *common) SetUnconditionalAuthorizer(a authorizer.UnconditionalAuthorizer) { c.authorizer = a }

// SetExcludedAdmissionResources implements initializer.WantsExcludedAdmissionResources.
func (c *common) SetExcludedAdmissionResources(resources []schema.GroupResource) {
	c.excluded.Insert(resources...)
}

// ValidateInitialization implements admission.InitializationValidator.
func (c *common) ValidateInitialization() error {
	if c.authorizer == nil {
		return fmt.Errorf("admission policies: missing authorizer")
	}
	return nil
}

// skip says whether a request is outside every policy, as upstream.
func (c *common) skip(a admission.Attributes) bool {
	gr := a.GetResource().GroupResource()
	return c.excluded.Has(gr) || admissionConfigResources.Has(gr)
}

// matcher returns upstream's matcher over plane's namespaces. Its lister
// already reads the datastore for a namespace the cache lacks, which is
// what upstream's client is for: the client reads the same way.
func (c *common) matcher(plane string) *matching.Matcher {
	namespaces := newNamespaceLister(c.registry, plane)
	return matching.NewMatcher(namespaces, namespaceClient{namespaces: namespaces})
}

func planeOf(ctx context.Context) (string, error) {
	plane, ok := planes.FromContext(ctx)
	if !ok {
		return "", fmt.Errorf("admission policies: request without a plane")
	}
	return plane, nil
}

func factory(p admission.Interface) admission.Factory {
	return func(io.Reader) (admission.Interface, error) { return p, nil }
}
