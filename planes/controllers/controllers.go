package controllers

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/sirupsen/logrus"
	apiextensionsscheme "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/scheme"
	"k8s.io/apimachinery/pkg/runtime/schema"
	schemaresolver "k8s.io/apiserver/pkg/cel/openapi/resolver"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	openapicommon "k8s.io/kube-openapi/pkg/common"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"

	"kplane.dev/kplane/planes/controllers/clusterroleaggregation"
	"kplane.dev/kplane/planes/controllers/gc"
	"kplane.dev/kplane/planes/controllers/namespace"
	"kplane.dev/kplane/planes/controllers/policystatus"
	"kplane.dev/kplane/planes/controllers/resourcequota"
	"kplane.dev/kplane/planes/controllers/serviceaccounts"
	"kplane.dev/kplane/planes/crds"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/loopback"
	planestorage "kplane.dev/kplane/planes/storage"

	// Work-queue depth, latency and retries of every controller in /metrics.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// Config is what the controllers work with.
type Config struct {
	// Loopback reaches the server as itself (system:masters).
	Loopback *rest.Config
	Storage  *planestorage.Registry
	// CustomResources serves every plane's CRDs.
	CustomResources *crds.Server
	// CACert goes into every kube-root-ca.crt ConfigMap.
	CACert []byte
	// BuiltinDefinitions are the OpenAPI definitions of the built-in types
	// the server serves, which admission policies are type-checked
	// against; nil: every type of the generated package.
	BuiltinDefinitions openapicommon.GetOpenAPIDefinitions
}

// Controllers are the generic controllers of every plane.
type Controllers struct {
	hub        *hub
	namespaces *namespace.Controller
	accounts   *serviceaccounts.Controller
	collector  *gc.Collector
	roles      *clusterroleaggregation.Controller
	quotas     *resourcequota.Controller
	policies   *policystatus.Controller
	resolver   *resolver
}

// New builds the controllers; Run starts them.
func New(config Config) (*Controllers, error) {
	// Controllers never bring a plane into being: work left for a deleted
	// plane fails with 404 instead. Nor do they write into a plane what
	// they decided before its reset: held by the reset, their requests are
	// refused (409) and they decide again on what the reset made, as the
	// workload controllers do.
	client := loopback.Controller(config.Loopback, lifecycle.NoProvisionHeader)
	client.Wrap(loopback.WithHeader(lifecycle.DecideAfterResetHeader))
	stores := func(resource string) *planestorage.Store {
		return config.Storage.Storage(coreResource(resource))
	}
	// Every plane serves the same built-in resources: the root plane's
	// discovery (bare paths) lists them.
	root := rest.CopyConfig(config.Loopback)
	root.Wrap(loopback.WithHeader(lifecycle.NoProvisionHeader))
	resolver := newResolver(root, config.Storage, config.CustomResources)
	namespaces, err := namespace.New(namespace.Config{
		Client: client, Resources: resolver.NamespacedResources, Storage: config.Storage, CustomResources: config.CustomResources,
	})
	if err != nil {
		return nil, err
	}
	accounts, err := serviceaccounts.New(serviceaccounts.Config{Client: client, Stores: stores, CACert: config.CACert})
	if err != nil {
		return nil, err
	}
	h := newHub(config.Storage, nil)
	collector, err := gc.New(gc.Config{Client: client, Storage: config.Storage, Resolver: resolver, Synced: h.synced,
		CustomResources: config.CustomResources})
	if err != nil {
		return nil, fmt.Errorf("garbage collector: %w", err)
	}
	roles, err := clusterroleaggregation.New(clusterroleaggregation.Config{Client: client, Storage: config.Storage})
	if err != nil {
		return nil, err
	}
	quotas, err := resourcequota.New(resourcequota.Config{Client: client, Storage: config.Storage})
	if err != nil {
		return nil, err
	}
	definitions := config.BuiltinDefinitions
	if definitions == nil {
		definitions = generatedopenapi.GetOpenAPIDefinitions
	}
	policies, err := policystatus.New(policystatus.Config{Client: client, Loopback: root, Storage: config.Storage, Kinds: resolver,
		Builtin: func() *schemaresolver.DefinitionsSchemaResolver {
			return schemaresolver.NewDefinitionsSchemaResolver(definitions, k8sscheme.Scheme, apiextensionsscheme.Scheme)
		}})
	if err != nil {
		return nil, err
	}
	h.subscribers = []Subscriber{namespaces, accounts, collector, roles, quotas, policies}
	return &Controllers{hub: h, namespaces: namespaces, accounts: accounts, collector: collector, roles: roles, quotas: quotas,
		policies: policies, resolver: resolver}, nil
}

// Run starts every controller and returns when ctx is done. phases says
// which planes are bootstrapped.
func (c *Controllers) Run(ctx context.Context, phases clusterroleaggregation.Phases) {
	go c.namespaces.Run(ctx)
	go c.accounts.Run(ctx)
	go c.collector.Run(ctx)
	go c.roles.Run(ctx, phases)
	go c.quotas.Run(ctx)
	go c.policies.Run(ctx)
	c.hub.run(ctx)
	<-ctx.Done()
}

// ForgetPlane drops what the controllers hold for a deleted plane.
func (c *Controllers) ForgetPlane(plane string) {
	c.collector.ForgetPlane(plane)
	c.namespaces.ForgetPlane(plane)
	c.quotas.ForgetPlane(plane)
}

// ForKind maps a kind to the resource serving it in plane: a built-in
// resource or one of the plane's CRDs.
func (c *Controllers) ForKind(ctx context.Context, plane string, gk schema.GroupKind) (schema.GroupVersionResource, bool, bool) {
	return c.resolver.ForKind(ctx, plane, gk)
}

// Terms runs the generic controllers one term at a time: one server of
// those sharing a datastore runs them, and a server that wins them again
// after losing them builds them afresh (queues, the garbage collector's
// graph and the followers of the caches all belong to one term).
type Terms struct {
	config Config
	// kinds answers ForKind whether or not a term runs.
	kinds   *Controllers
	current atomic.Pointer[Controllers]
}

// NewTerms checks config by building the controllers once (they answer
// ForKind); Run runs a term.
func NewTerms(config Config) (*Terms, error) {
	kinds, err := New(config)
	if err != nil {
		return nil, err
	}
	return &Terms{config: config, kinds: kinds}, nil
}

// Run runs the controllers until ctx is done, then forgets them.
func (t *Terms) Run(ctx context.Context, phases clusterroleaggregation.Phases) {
	c, err := New(t.config)
	if err != nil {
		logrus.WithError(err).Error("generic controllers cannot start")
		return
	}
	t.current.Store(c)
	defer t.current.CompareAndSwap(c, nil)
	c.Run(ctx, phases)
}

// ForgetPlane drops what the running term keeps for a deleted plane.
func (t *Terms) ForgetPlane(plane string) {
	if c := t.current.Load(); c != nil {
		c.ForgetPlane(plane)
	}
}

// ForKind implements planes/policies.KindResolver.
func (t *Terms) ForKind(ctx context.Context, plane string, gk schema.GroupKind) (schema.GroupVersionResource, bool, bool) {
	return t.kinds.ForKind(ctx, plane, gk)
}
