package services

import (
	"context"
	"fmt"
	"net"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"
	"k8s.io/kubernetes/pkg/registry/core/service/portallocator"
	servicestore "k8s.io/kubernetes/pkg/registry/core/service/storage"
	netutils "k8s.io/utils/net"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kplane.dev/kplane/planes"
)

// Config describes the address space every plane allocates from.
type Config struct {
	ClusterIPRange net.IPNet
	NodePortRange  utilnet.PortRange
	// Pods is the pod registry (used by the upstream registry to validate
	// endpoint addresses on the proxy path, which kplane does not serve).
	Pods servicestore.PodStorage
}

// REST is the Service registry: reads are served by a shared upstream
// registry, writes by the registry of the caller's plane.
type REST struct {
	*servicestore.REST
	config      Config
	optsGetter  generic.RESTOptionsGetter
	sharedState *servicestore.StatusREST

	mu      sync.Mutex
	byPlane map[string]*planeEntry
}

// planeEntry is built once per plane; the first writer of a plane seeds it
// while writers of other planes go on.
type planeEntry struct {
	once sync.Once
	reg  *planeRegistry
	err  error
}

type planeRegistry struct {
	rest   *servicestore.REST
	status *servicestore.StatusREST
}

// allocators are the in-memory address pools of one registry.
type allocators struct {
	ips   *ipallocator.Range
	ports *portallocator.PortAllocator
}

var (
	_ rest.StandardStorage        = &REST{}
	_ rest.CategoriesProvider     = &REST{}
	_ rest.ShortNamesProvider     = &REST{}
	_ rest.StorageVersionProvider = &REST{}
	_ rest.ResetFieldsStrategy    = &REST{}
	_ rest.SingularNameProvider   = &REST{}
)

// NewREST returns the Service registry and its status subresource.
func NewREST(optsGetter generic.RESTOptionsGetter, config Config) (*REST, *StatusREST, error) {
	shared, sharedStatus, _, err := newUpstream(optsGetter, config)
	if err != nil {
		return nil, nil, err
	}
	r := &REST{
		REST:        shared,
		config:      config,
		optsGetter:  noCountPolling{optsGetter},
		sharedState: sharedStatus,
		byPlane:     map[string]*planeEntry{},
	}
	return r, &StatusREST{r}, nil
}

func newUpstream(optsGetter generic.RESTOptionsGetter, config Config) (*servicestore.REST, *servicestore.StatusREST, allocators, error) {
	ips, err := ipallocator.NewInMemory(&config.ClusterIPRange)
	if err != nil {
		return nil, nil, allocators{}, fmt.Errorf("service cluster IP range %s: %w", config.ClusterIPRange.String(), err)
	}
	ports, err := portallocator.NewInMemory(config.NodePortRange)
	if err != nil {
		return nil, nil, allocators{}, fmt.Errorf("service node port range %s: %w", config.NodePortRange.String(), err)
	}
	family := api.IPv4Protocol
	if netutils.IsIPv6CIDR(&config.ClusterIPRange) {
		family = api.IPv6Protocol
	}
	r, status, _, err := servicestore.NewREST(optsGetter, family,
		map[api.IPFamily]ipallocator.Interface{family: ips}, ports, nil, config.Pods, nil)
	return r, status, allocators{ips: ips, ports: ports}, err
}

// forPlane returns the write registry of the plane in ctx, creating it (and
// seeding its allocators from the plane's stored Services) on first use.
func (r *REST) forPlane(ctx context.Context) (*planeRegistry, error) {
	plane, ok := planes.FromContext(ctx)
	if !ok {
		return nil, apierrors.NewInternalError(fmt.Errorf("service write without a plane refused"))
	}
	r.mu.Lock()
	entry, ok := r.byPlane[plane]
	if !ok {
		entry = &planeEntry{}
		r.byPlane[plane] = entry
	}
	r.mu.Unlock()

	entry.once.Do(func() {
		upstream, status, pools, err := newUpstream(r.optsGetter, r.config)
		if err == nil {
			err = r.seed(ctx, pools)
		}
		if err != nil {
			entry.err = err
			return
		}
		entry.reg = &planeRegistry{rest: upstream, status: status}
	})
	if entry.err != nil {
		// Let the next writer retry instead of caching the failure.
		r.mu.Lock()
		if r.byPlane[plane] == entry {
			delete(r.byPlane, plane)
		}
		r.mu.Unlock()
		return nil, entry.err
	}
	return entry.reg, nil
}

// seed marks every IP and port already held by a Service of the plane as
// allocated. The list is a consistent read, so a restart never hands out an
// address a stored Service holds.
func (r *REST) seed(ctx context.Context, pools allocators) error {
	list, err := r.REST.Store.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing services to seed allocators: %w", err)
	}
	for i := range list.(*api.ServiceList).Items {
		svc := &list.(*api.ServiceList).Items[i]
		for _, ip := range svc.Spec.ClusterIPs {
			if parsed := netutils.ParseIPSloppy(ip); parsed != nil && !pools.ips.Has(parsed) {
				// Out-of-range and other-family addresses are not ours to track.
				_ = pools.ips.Allocate(parsed)
			}
		}
		for _, port := range svc.Spec.Ports {
			if port.NodePort != 0 {
				_ = pools.ports.Allocate(int(port.NodePort))
			}
		}
		if svc.Spec.HealthCheckNodePort != 0 {
			_ = pools.ports.Allocate(int(svc.Spec.HealthCheckNodePort))
		}
	}
	return nil
}

// ForgetPlane drops the write registry of a deleted plane.
func (r *REST) ForgetPlane(plane string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byPlane, plane)
}

// Create implements rest.Creater.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	p, err := r.forPlane(ctx)
	if err != nil {
		return nil, err
	}
	return p.rest.Create(ctx, obj, createValidation, options)
}

// Update implements rest.Updater.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	p, err := r.forPlane(ctx)
	if err != nil {
		return nil, false, err
	}
	return p.rest.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
}

// Delete implements rest.GracefulDeleter.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	p, err := r.forPlane(ctx)
	if err != nil {
		return nil, false, err
	}
	return p.rest.Delete(ctx, name, deleteValidation, options)
}

// DeleteCollection implements rest.CollectionDeleter.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions,
	listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	p, err := r.forPlane(ctx)
	if err != nil {
		return nil, err
	}
	return p.rest.DeleteCollection(ctx, deleteValidation, options, listOptions)
}

// StatusREST is the services/status subresource.
type StatusREST struct{ r *REST }

// New implements rest.Storage.
func (s *StatusREST) New() runtime.Object { return &api.Service{} }

// Destroy implements rest.Storage; the storage is owned by REST.
func (s *StatusREST) Destroy() {}

// Get implements rest.Getter.
func (s *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return s.r.sharedState.Get(ctx, name, options)
}

// Update implements rest.Updater. A status update that removes the last
// finalizer deletes the Service, so it must release that plane's addresses.
func (s *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	p, err := s.r.forPlane(ctx)
	if err != nil {
		return nil, false, err
	}
	return p.status.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
}

// GetResetFields implements rest.ResetFieldsStrategy.
func (s *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return s.r.sharedState.GetResetFields()
}

// ConvertToTable implements rest.TableConvertor.
func (s *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return s.r.sharedState.ConvertToTable(ctx, object, tableOptions)
}

// noCountPolling turns off the per-registry object count poller: the
// per-plane registries share the storage of the shared one, which already
// reports the count, and a poller per plane would be a goroutine per plane.
type noCountPolling struct{ generic.RESTOptionsGetter }

func (g noCountPolling) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(resource, example)
	opts.CountMetricPollPeriod = 0
	return opts, err
}
