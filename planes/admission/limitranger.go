package admission

import (
	"context"
	"fmt"
	"io"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/kubernetes/plugin/pkg/admission/limitranger"
	"k8s.io/utils/lru"

	"kplane.dev/kplane/planes"
)

// LimitRangerPluginName is the name kplane registers its plane-aware
// LimitRanger under; it replaces the upstream plugin.
const LimitRangerPluginName = "kplane.dev/LimitRanger"

// LimitRangeLister reads the LimitRanges of a plane's namespace from the
// shared cache or, with live, from the datastore.
type LimitRangeLister interface {
	ListLimitRanges(ctx context.Context, plane, namespace string, live bool) ([]*corev1.LimitRange, error)
}

// liveLookupTTL is how long a namespace found without LimitRanges in the
// datastore is believed, as upstream.
const liveLookupTTL = 30 * time.Second

// LimitRanger is upstream's LimitRanger in the plane of each request:
// upstream's actions (defaults, min/max, ratios for containers, pods and
// PVCs) applied with the LimitRanges of the request's plane and namespace.
// The upstream plugin reads them through one informer's lister and cannot
// be told the plane; what it does around the actions is repeated here.
type LimitRanger struct {
	*admission.Handler
	actions limitranger.LimitRangerActions
	ranges  LimitRangeLister

	// live remembers the namespaces found empty in the datastore, as
	// upstream's live lookup does for a cache that may lag behind (nil:
	// no live lookups).
	live  *lru.Cache
	group singleflight.Group
}

var (
	_ admission.MutationInterface   = &LimitRanger{}
	_ admission.ValidationInterface = &LimitRanger{}
)

// NewLimitRanger returns the plugin. With liveLookups, a namespace the
// cache shows without LimitRanges is looked up in the datastore, as
// upstream does: for servers that share a datastore, whose caches lag
// behind each other's writes. A server alone on its datastore needs none:
// its cache reads are no older than every write it acknowledged
// (planes/storage Store.GetListAfterWrites), and a lookup per plane and
// namespace was a datastore list for each plane's first Pods.
func NewLimitRanger(ranges LimitRangeLister, liveLookups bool) *LimitRanger {
	p := &LimitRanger{
		Handler: admission.NewHandler(admission.Create, admission.Update),
		actions: &limitranger.DefaultLimitRangerActions{},
		ranges:  ranges,
	}
	if liveLookups {
		p.live = lru.New(10000)
	}
	return p
}

// Factory returns an admission.Factory that always yields p.
func (p *LimitRanger) Factory() admission.Factory {
	return func(io.Reader) (admission.Interface, error) { return p, nil }
}

// Admit sets defaults.
func (p *LimitRanger) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	return p.run(ctx, a, p.actions.MutateLimit)
}

// Validate enforces limits.
func (p *LimitRanger) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	return p.run(ctx, a, p.actions.ValidateLimit)
}

func (p *LimitRanger) run(ctx context.Context, a admission.Attributes, limit func(*corev1.LimitRange, string, runtime.Object) error) error {
	if !p.actions.SupportsAttributes(a) {
		return nil
	}
	// Objects being deleted are left alone, as upstream.
	if old := a.GetOldObject(); old != nil {
		accessor, err := meta.Accessor(old)
		if err != nil {
			return admission.NewForbidden(a, err)
		}
		if accessor.GetDeletionTimestamp() != nil {
			return nil
		}
	}
	plane, ok := planes.FromContext(ctx)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("limit ranger: request without a plane"))
	}
	items, err := p.limitRanges(ctx, plane, a)
	if err != nil {
		return err
	}
	for _, lr := range items {
		if !p.actions.SupportsLimit(lr) {
			continue
		}
		if err := limit(lr, a.GetResource().Resource, a.GetObject()); err != nil {
			return admission.NewForbidden(a, err)
		}
	}
	return nil
}

type liveEntry struct {
	expiry time.Time
	items  []*corev1.LimitRange
}

// limitRanges returns the LimitRanges of the request's namespace: from the
// cache, or when it has none and live lookups are on, from the datastore
// at most once per liveLookupTTL and namespace (upstream's live lookup).
func (p *LimitRanger) limitRanges(ctx context.Context, plane string, a admission.Attributes) ([]*corev1.LimitRange, error) {
	namespace := a.GetNamespace()
	unavailable := func() error {
		return admission.NewForbidden(a, fmt.Errorf("unable to %s %v at this time because there was an error enforcing limit ranges", a.GetOperation(), a.GetResource()))
	}
	items, err := p.ranges.ListLimitRanges(ctx, plane, namespace, false)
	if err != nil {
		return nil, unavailable()
	}
	if len(items) > 0 || p.live == nil {
		return items, nil
	}
	key := planeNamespace(plane, namespace)
	if entry, ok := p.live.Get(key); ok && entry.(liveEntry).expiry.After(time.Now()) {
		return entry.(liveEntry).items, nil
	}
	entry, err, _ := p.group.Do(key, func() (interface{}, error) {
		items, err := p.ranges.ListLimitRanges(ctx, plane, namespace, true)
		if err != nil {
			return nil, err
		}
		e := liveEntry{expiry: time.Now().Add(liveLookupTTL), items: items}
		p.live.Add(key, e)
		return e, nil
	})
	if err != nil {
		return nil, unavailable()
	}
	return entry.(liveEntry).items, nil
}
