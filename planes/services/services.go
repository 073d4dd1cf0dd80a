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
	"k8s.io/kubernetes/pkg/registry/core/service/allocator"
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
	records     *allocationRecords

	mu      sync.Mutex
	byPlane map[string]*planeEntry
}

// planeEntry is built once per plane; the first writer of a plane builds
// it while writers of other planes go on.
type planeEntry struct {
	once sync.Once
	reg  *planeRegistry
	err  error
}

type planeRegistry struct {
	rest   *servicestore.REST
	status *servicestore.StatusREST
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
	// The shared registry only reads: its allocators are never asked.
	ips, err := ipallocator.NewInMemory(&config.ClusterIPRange)
	if err != nil {
		return nil, nil, fmt.Errorf("service cluster IP range %s: %w", config.ClusterIPRange.String(), err)
	}
	ports, err := portallocator.NewInMemory(config.NodePortRange)
	if err != nil {
		return nil, nil, fmt.Errorf("service node port range %s: %w", config.NodePortRange.String(), err)
	}
	shared, sharedStatus, err := newUpstream(optsGetter, config, ips, ports)
	if err != nil {
		return nil, nil, err
	}
	records, err := newAllocationRecords(optsGetter)
	if err != nil {
		return nil, nil, err
	}
	r := &REST{
		REST:        shared,
		config:      config,
		optsGetter:  noCountPolling{optsGetter},
		sharedState: sharedStatus,
		records:     records,
		byPlane:     map[string]*planeEntry{},
	}
	return r, &StatusREST{r}, nil
}

func newUpstream(optsGetter generic.RESTOptionsGetter, config Config, ips ipallocator.Interface, ports portallocator.Interface) (*servicestore.REST, *servicestore.StatusREST, error) {
	family := api.IPv4Protocol
	if netutils.IsIPv6CIDR(&config.ClusterIPRange) {
		family = api.IPv6Protocol
	}
	r, status, _, err := servicestore.NewREST(optsGetter, family,
		map[api.IPFamily]ipallocator.Interface{family: ips}, ports, nil, config.Pods, nil)
	return r, status, err
}

// Destroy implements rest.Storage.
func (r *REST) Destroy() {
	r.mu.Lock()
	for _, entry := range r.byPlane {
		if entry.reg != nil {
			entry.reg.rest.Destroy()
		}
	}
	r.mu.Unlock()
	r.REST.Destroy()
	r.records.destroy()
}

// forPlane returns the write registry of the plane in ctx, creating it on
// first use.
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
		entry.reg, entry.err = r.newPlaneRegistry(plane)
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

// newPlaneRegistry builds the upstream registry of one plane on allocators
// of the plane's records in the datastore. It holds no allocation state:
// every allocation reads and swaps the record.
func (r *REST) newPlaneRegistry(plane string) (*planeRegistry, error) {
	ips, err := ipallocator.New(&r.config.ClusterIPRange, r.recordFactory(plane, clusterIPsRecord, r.seedClusterIPs))
	if err != nil {
		return nil, fmt.Errorf("service cluster IP range %s: %w", r.config.ClusterIPRange.String(), err)
	}
	ports, err := portallocator.New(r.config.NodePortRange, r.recordFactory(plane, nodePortsRecord, r.seedNodePorts))
	if err != nil {
		return nil, fmt.Errorf("service node port range %s: %w", r.config.NodePortRange.String(), err)
	}
	upstream, status, err := newUpstream(r.optsGetter, r.config, ips, ports)
	if err != nil {
		return nil, err
	}
	return &planeRegistry{rest: upstream, status: status}, nil
}

func (r *REST) recordFactory(plane, name string, seed seedFunc) allocator.AllocatorWithOffsetFactory {
	return func(max int, rangeSpec string, offset int) (allocator.Interface, error) {
		a := &recordAllocator{records: r.records, plane: plane, name: name,
			max: max, offset: offset, rangeSpec: rangeSpec, seed: seed}
		a.free.Store(int64(max))
		return a, nil
	}
}

// planeServices lists the Services of ctx's plane. The list is a
// consistent read, so a record seeded from it misses no stored Service.
func (r *REST) planeServices(ctx context.Context) ([]api.Service, error) {
	list, err := r.REST.Store.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing services to seed allocations: %w", err)
	}
	return list.(*api.ServiceList).Items, nil
}

// seedClusterIPs is the cluster IP record of a plane that has none: the
// addresses its Services hold (Services made before records were kept,
// and default/kubernetes, which the bootstrap writes without allocating).
func (r *REST) seedClusterIPs(ctx context.Context) (*api.RangeAllocation, error) {
	svcs, err := r.planeServices(ctx)
	if err != nil {
		return nil, err
	}
	return r.clusterIPsHeld(svcs)
}

// seedNodePorts is seedClusterIPs for node ports.
func (r *REST) seedNodePorts(ctx context.Context) (*api.RangeAllocation, error) {
	svcs, err := r.planeServices(ctx)
	if err != nil {
		return nil, err
	}
	return r.nodePortsHeld(svcs)
}

// clusterIPsHeld is the cluster IP record that svcs make: every address of
// the range they hold.
func (r *REST) clusterIPsHeld(svcs []api.Service) (*api.RangeAllocation, error) {
	ips, err := ipallocator.NewInMemory(&r.config.ClusterIPRange)
	if err != nil {
		return nil, err
	}
	for i := range svcs {
		for _, ip := range svcs[i].Spec.ClusterIPs {
			if parsed := netutils.ParseIPSloppy(ip); parsed != nil {
				// Out-of-range and other-family addresses are not ours to track.
				_ = ips.Allocate(parsed)
			}
		}
	}
	snap := &api.RangeAllocation{}
	return snap, ips.Snapshot(snap)
}

// nodePortsHeld is clusterIPsHeld for node ports.
func (r *REST) nodePortsHeld(svcs []api.Service) (*api.RangeAllocation, error) {
	ports, err := portallocator.NewInMemory(r.config.NodePortRange)
	if err != nil {
		return nil, err
	}
	for i := range svcs {
		for _, port := range svcs[i].Spec.Ports {
			if port.NodePort != 0 {
				_ = ports.Allocate(int(port.NodePort))
			}
		}
		if svcs[i].Spec.HealthCheckNodePort != 0 {
			_ = ports.Allocate(int(svcs[i].Spec.HealthCheckNodePort))
		}
	}
	snap := &api.RangeAllocation{}
	return snap, ports.Snapshot(snap)
}

// writable refuses a write to a template in use before anything is
// allocated for it (the allocation's own refusal would reach the client
// as an internal error).
func (r *REST) writable(ctx context.Context) error {
	if s, ok := r.REST.Store.Storage.Storage.(interface{ Writable(context.Context) error }); ok {
		return s.Writable(ctx)
	}
	return nil
}

// ForgetPlane drops the write registry of a deleted plane (its records go
// with the plane's other storage).
func (r *REST) ForgetPlane(plane string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byPlane, plane)
}

// Create implements rest.Creater.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if err := r.writable(ctx); err != nil {
		return nil, err
	}
	p, err := r.forPlane(ctx)
	if err != nil {
		return nil, err
	}
	return p.rest.Create(ctx, obj, createValidation, options)
}

// Update implements rest.Updater.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	if err := r.writable(ctx); err != nil {
		return nil, false, err
	}
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
