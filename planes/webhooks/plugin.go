package webhooks

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/loopback"
	planestorage "kplane.dev/kplane/planes/storage"
)

// upstreamPlugin is what kplane sets on upstream's ValidatingAdmissionWebhook
// and MutatingAdmissionWebhook plugins (their generic.Webhook) in place of
// the admission initializers.
type upstreamPlugin interface {
	admission.Interface
	admission.InitializationValidator
	SetAPIServerID(string)
	SetExternalKubeClientSet(kubernetes.Interface)
	SetExternalKubeInformerFactory(informers.SharedInformerFactory)
	SetAuthenticationInfoResolverWrapper(webhookutil.AuthenticationInfoResolverWrapper)
	SetServiceResolver(webhookutil.ServiceResolver)
	SetDrainedNotification(<-chan struct{})
	SetExcludedAdmissionResources([]schema.GroupResource)
	InspectFeatureGates(featuregate.FeatureGate)
	SetUnconditionalAuthorizer(authorizer.UnconditionalAuthorizer)
}

// kind is what differs between the validating and the mutating plugin.
type kind struct {
	name     string
	resource schema.GroupResource
	// newUpstream builds upstream's plugin.
	newUpstream func() (upstreamPlugin, error)
	// hold converts a plane's configurations (the storage's internal
	// objects) into the informer factory of its upstream plugin.
	hold func(f *planeInformers, items []runtime.Object) error
}

// Config is what the webhook plugins of all planes share.
type Config struct {
	Registry *planestorage.Registry
	Egress   *EgressPolicy
	// MaxInFlightPerPlane bounds the webhook calls of one plane in flight
	// at once: a call beyond it fails at once (and the webhook's
	// failurePolicy decides), so one plane's slow webhooks cannot hold
	// the requests, and the server's in-flight capacity, of the others.
	MaxInFlightPerPlane int
}

// Plugin is one admission plugin, validating or mutating, for every plane.
// A plane with webhook configurations has an upstream plugin instance of
// its own, built lazily for the configurations it holds (names and
// resourceVersions) and rebuilt when they change; a plane without any has
// none and pays one list of the (empty) configurations in the watch cache
// per request.
type Plugin struct {
	*admission.Handler
	kind   kind
	config Config

	// Set by the admission initializers, handed to every plane's
	// upstream plugin.
	loopback     *rest.Config
	loopbackHTTP *http.Client
	stopCh       <-chan struct{}
	apiServerID  string
	excluded     []schema.GroupResource
	features     featuregate.FeatureGate
	authorizer   authorizer.Authorizer

	mu     sync.RWMutex
	planes map[string]*planeState
}

// planeState is what a plane with webhook configurations has.
type planeState struct {
	limit *planeLimit
	build sync.Mutex
	hooks atomic.Pointer[planeHooks]
}

// planeHooks is one plane's upstream plugin and what it was built for.
type planeHooks struct {
	version string
	plugin  upstreamPlugin
}

var (
	_ initializer.WantsDrainedNotification        = &Plugin{}
	_ initializer.WantsAPIServerID                = &Plugin{}
	_ initializer.WantsExcludedAdmissionResources = &Plugin{}
	_ initializer.WantsFeatures                   = &Plugin{}
	_ initializer.WantsAuthorizer                 = &Plugin{}
	_ admission.InitializationValidator           = &Plugin{}
)

func newPlugin(k kind, config Config) *Plugin {
	return &Plugin{
		// Upstream's operations.
		Handler: admission.NewHandler(admission.Connect, admission.Create, admission.Delete, admission.Update),
		kind:    k,
		config:  config,
		planes:  map[string]*planeState{},
	}
}

// SetLoopback implements planes/admission.WantsLoopback: a plane's
// upstream plugin reads a namespace the cache does not hold yet through it.
func (p *Plugin) SetLoopback(config *rest.Config) {
	c := rest.CopyConfig(config)
	c.Wrap(loopback.WithHeader(lifecycle.NoProvisionHeader))
	p.loopback = c
}

// SetDrainedNotification implements initializer.WantsDrainedNotification.
func (p *Plugin) SetDrainedNotification(stopCh <-chan struct{}) { p.stopCh = stopCh }

// SetAPIServerID implements initializer.WantsAPIServerID.
func (p *Plugin) SetAPIServerID(id string) { p.apiServerID = id }

// SetExcludedAdmissionResources implements
// initializer.WantsExcludedAdmissionResources.
func (p *Plugin) SetExcludedAdmissionResources(resources []schema.GroupResource) {
	p.excluded = resources
}

// InspectFeatureGates implements initializer.WantsFeatures.
func (p *Plugin) InspectFeatureGates(features featuregate.FeatureGate) { p.features = features }

// SetAuthorizer implements initializer.WantsAuthorizer: matchConditions
// that authorize are evaluated by the server's (plane-aware) authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// ValidateInitialization implements admission.InitializationValidator.
func (p *Plugin) ValidateInitialization() error {
	switch {
	case p.config.Registry == nil:
		return fmt.Errorf("%s: missing storage registry", p.kind.name)
	case p.config.Egress == nil:
		return fmt.Errorf("%s: missing egress policy", p.kind.name)
	case p.loopback == nil:
		return fmt.Errorf("%s: missing loopback configuration", p.kind.name)
	case p.stopCh == nil:
		return fmt.Errorf("%s: missing drained notification", p.kind.name)
	}
	client, err := rest.HTTPClientFor(p.loopback)
	if err != nil {
		return fmt.Errorf("%s: loopback client: %w", p.kind.name, err)
	}
	p.loopbackHTTP = client
	return nil
}

// ForgetPlane implements lifecycle.Forgetter: a deleted plane's upstream
// plugin is dropped.
func (p *Plugin) ForgetPlane(plane string) { p.drop(plane) }

// dispatch hands a request to the upstream plugin of its plane, if the
// plane has webhook configurations.
func (p *Plugin) dispatch(ctx context.Context, a admission.Attributes, call func(upstreamPlugin) error) error {
	plane, ok := planes.FromContext(ctx)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("%s: request without a plane", p.kind.name))
	}
	hooks, err := p.hooksOf(ctx, plane)
	if err != nil {
		return admission.NewForbidden(a, fmt.Errorf("%s: %w", p.kind.name, err))
	}
	if hooks == nil {
		return nil
	}
	return call(hooks.plugin)
}

// hooksOf returns the plane's upstream plugin for the configurations the
// cache holds now, or nil when there are none.
func (p *Plugin) hooksOf(ctx context.Context, plane string) (*planeHooks, error) {
	if p.config.Registry.Storage(p.kind.resource) == nil {
		// Not served (yet): no plane can hold configurations.
		return nil, nil
	}
	if !p.config.Registry.MayHold(plane, p.kind.resource) {
		p.drop(plane)
		return nil, nil
	}
	items, err := objects{registry: p.config.Registry, plane: plane}.list(ctx, p.kind.resource, "")
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		p.drop(plane)
		return nil, nil
	}
	version, err := versionOf(items)
	if err != nil {
		return nil, err
	}
	state := p.stateOf(plane)
	if current := state.hooks.Load(); current != nil && current.version == version {
		return current, nil
	}
	// One build at a time per plane: requests that arrive meanwhile wait
	// for it instead of building the same plugin again.
	state.build.Lock()
	defer state.build.Unlock()
	if current := state.hooks.Load(); current != nil && current.version == version {
		return current, nil
	}
	built, err := p.build(plane, items, state.limit)
	if err != nil {
		return nil, err
	}
	hooks := &planeHooks{version: version, plugin: built}
	state.hooks.Store(hooks)
	return hooks, nil
}

// stateOf returns the state of a plane with configurations, made on first
// use: its concurrency limit lives as long as the plane has webhooks.
func (p *Plugin) stateOf(plane string) *planeState {
	p.mu.RLock()
	state := p.planes[plane]
	p.mu.RUnlock()
	if state != nil {
		return state
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if state = p.planes[plane]; state == nil {
		state = &planeState{limit: newPlaneLimit(p.config.MaxInFlightPerPlane)}
		p.planes[plane] = state
	}
	return state
}

func (p *Plugin) drop(plane string) {
	p.mu.RLock()
	_, ok := p.planes[plane]
	p.mu.RUnlock()
	if !ok {
		return
	}
	p.mu.Lock()
	delete(p.planes, plane)
	p.mu.Unlock()
}

// versionOf identifies a set of configurations: their names and
// resourceVersions.
func versionOf(items []runtime.Object) (string, error) {
	var b strings.Builder
	for _, item := range items {
		accessor, err := meta.Accessor(item)
		if err != nil {
			return "", err
		}
		b.WriteString(accessor.GetName())
		b.WriteByte('@')
		b.WriteString(accessor.GetResourceVersion())
		b.WriteByte(',')
	}
	return b.String(), nil
}

// build makes the upstream plugin of a plane for items, initialized as the
// admission initializers would, with the plane's namespaces, Services and
// EndpointSlices, a loopback client to the plane, the egress policy and
// the plane's concurrency limit.
func (p *Plugin) build(plane string, items []runtime.Object, limit *planeLimit) (upstreamPlugin, error) {
	o := objects{registry: p.config.Registry, plane: plane}
	f := &planeInformers{namespaces: namespaceLister{o}}
	if err := p.kind.hold(f, items); err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfigAndClient(loopback.ForPlane(p.loopback, plane), p.loopbackHTTP)
	if err != nil {
		return nil, fmt.Errorf("loopback client of plane %s: %w", plane, err)
	}
	up, err := p.kind.newUpstream()
	if err != nil {
		return nil, err
	}
	up.SetAPIServerID(p.apiServerID)
	up.SetDrainedNotification(p.stopCh)
	up.SetExcludedAdmissionResources(p.excluded)
	if p.features != nil {
		up.InspectFeatureGates(p.features)
	}
	if p.authorizer != nil {
		up.SetUnconditionalAuthorizer(p.authorizer)
	}
	up.SetExternalKubeClientSet(client)
	up.SetExternalKubeInformerFactory(f)
	up.SetServiceResolver(serviceResolver{o})
	up.SetAuthenticationInfoResolverWrapper(egressResolverWrapper(p.config.Egress, limit))
	if err := up.ValidateInitialization(); err != nil {
		return nil, fmt.Errorf("webhooks of plane %s: %w", plane, err)
	}
	return up, nil
}
