package admission

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	upstream "k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	resourcequotaapi "k8s.io/apiserver/pkg/admission/plugin/resourcequota/apis/resourcequota"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/loopback"
)

// ResourceQuotaPluginName is the name kplane registers its plane-aware
// ResourceQuota admission under; it replaces the upstream plugin.
const ResourceQuotaPluginName = "kplane.dev/ResourceQuota"

// quotaWorkers is upstream's number of evaluator workers: shared by all
// planes.
const quotaWorkers = 5

// ResourceQuota is upstream's ResourceQuota admission for every plane at
// once: one upstream quota evaluator (its batching per namespace, its
// checks, its 403 messages, its status updates) whose namespaces are
// plane-qualified (planeNamespace), reading each plane's quotas from the
// shared watch cache (quotaAccessor) and writing their usage into that
// plane. The upstream plugin itself cannot be used: it reads quotas through
// one informer's lister and writes them with one unrouted client.
type ResourceQuota struct {
	*admission.Handler
	quotas    QuotaLister
	accessor  *quotaAccessor
	stopCh    <-chan struct{}
	config    quota.Configuration
	evaluator upstream.Evaluator
}

var (
	_ admission.ValidationInterface        = &ResourceQuota{}
	_ initializer.WantsQuotaConfiguration  = &ResourceQuota{}
	_ initializer.WantsDrainedNotification = &ResourceQuota{}
	_ admission.InitializationValidator    = &ResourceQuota{}
	_ WantsLoopback                        = &ResourceQuota{}
)

// NewResourceQuota returns the plugin; quotas reads the quotas of a
// plane's namespace.
func NewResourceQuota(quotas QuotaLister) *ResourceQuota {
	return &ResourceQuota{
		Handler:  admission.NewHandler(admission.Create, admission.Update),
		quotas:   quotas,
		accessor: newQuotaAccessor(quotas),
	}
}

// Factory returns an admission.Factory that always yields p.
func (p *ResourceQuota) Factory() admission.Factory {
	return func(io.Reader) (admission.Interface, error) { return p, nil }
}

// SetDrainedNotification implements initializer.WantsDrainedNotification.
func (p *ResourceQuota) SetDrainedNotification(stopCh <-chan struct{}) { p.stopCh = stopCh }

// SetLoopback implements WantsLoopback: usage is written through a
// client that addresses the quota's plane and never provisions one.
func (p *ResourceQuota) SetLoopback(config *rest.Config) {
	routed := loopback.Controller(config, lifecycle.NoProvisionHeader)
	routed.QPS = -1
	client, err := kubernetes.NewForConfig(routed)
	if err == nil {
		p.accessor.client = client
	}
}

// SetQuotaConfiguration implements initializer.WantsQuotaConfiguration
// (upstream's evaluators for admission). It runs after the drained
// notification and the loopback are set (initializers run in order).
func (p *ResourceQuota) SetQuotaConfiguration(c quota.Configuration) {
	p.config = c
}

// ValidateInitialization builds the evaluator once everything is set.
func (p *ResourceQuota) ValidateInitialization() error {
	switch {
	case p.stopCh == nil:
		return fmt.Errorf("%s: missing drained notification", ResourceQuotaPluginName)
	case p.config == nil:
		return fmt.Errorf("%s: missing quota configuration", ResourceQuotaPluginName)
	case p.accessor.client == nil:
		return fmt.Errorf("%s: missing loopback client", ResourceQuotaPluginName)
	}
	p.evaluator = upstream.NewQuotaEvaluator(p.accessor, p.config.IgnoredResources(),
		generic.NewRegistry(p.config.Evaluators()), nil, &resourcequotaapi.Configuration{}, quotaWorkers, p.stopCh)
	return nil
}

// Validate is upstream's: requests in a namespace, other than creating a
// namespace, are checked against the quotas of that namespace in the
// request's plane. A namespace without quotas costs one read of the cache.
func (p *ResourceQuota) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetNamespace() == "" || (a.GetOperation() == admission.Create && a.GetKind().GroupKind() == namespaceKind) {
		return nil
	}
	plane, ok := planes.FromContext(ctx)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("resource quota: request without a plane"))
	}
	// No quota: nothing to check, as upstream decides (without limited
	// resources configured) after a round through its work queue.
	quotas, err := p.quotas.ListQuotas(ctx, plane, a.GetNamespace())
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if len(quotas) == 0 {
		return nil
	}
	// Upstream fills in an object's empty namespace from the request's,
	// which here is plane-qualified.
	if accessor, err := meta.Accessor(a.GetObject()); err == nil && accessor.GetNamespace() == "" {
		accessor.SetNamespace(a.GetNamespace())
	}
	return p.evaluator.Evaluate(planeAttributes{Attributes: a, namespace: planeNamespace(plane, a.GetNamespace())})
}

// planeAttributes are a request's attributes as upstream's quota evaluator
// sees them: the namespace qualified by the plane, so that its batches per
// namespace, its reads and its writes stay in the plane.
type planeAttributes struct {
	admission.Attributes
	namespace string
}

func (a planeAttributes) GetNamespace() string { return a.namespace }

// QuotaLister reads the ResourceQuotas of a plane's namespace.
type QuotaLister interface {
	ListQuotas(ctx context.Context, plane, namespace string) ([]corev1.ResourceQuota, error)
}
