package services

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"

	"kplane.dev/kplane/datastore"
	"kplane.dev/kplane/planes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// getter hands out storage on the datastore behind a watch cache, as the
// server's getter does.
type getter struct{ config *storagebackend.Config }

func (g getter) GetRESTOptions(resource schema.GroupResource, _ runtime.Object) (generic.RESTOptions, error) {
	return generic.RESTOptions{StorageConfig: g.config.ForResource(resource), Decorator: genericregistry.StorageWithCacher(),
		ResourcePrefix: resource.Resource}, nil
}

// startDatastore runs the default datastore (kine over SQLite) in a temp
// dir and returns the etcd endpoints to reach it.
func startDatastore(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := datastore.Listen(ctx, datastore.Config{DataDir: t.TempDir()})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); d.Close() })
	return d.Endpoints
}

// newServer is one server's Service registry on the datastore at
// endpoints: its own plane-scoped storage and storage clients, as a
// second process would have; uncached as the server keeps the records.
func newServer(t *testing.T, endpoints []string, cidr string, uncached bool) *REST {
	t.Helper()
	config := storagebackend.NewDefaultConfig("/registry", legacyscheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion))
	config.Transport.ServerList = endpoints
	_, ipnet, _ := net.ParseCIDR(cidr)
	ports, _ := utilnet.ParsePortRange("30000-32767")
	stores := planestorage.NewRegistry()
	if uncached {
		stores.SetUncached(AllocationsResource)
	}
	r, _, err := NewREST(stores.Wrap(getter{config}), Config{ClusterIPRange: *ipnet, NodePortRange: *ports})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Destroy)
	return r
}

func planeContext(plane string) context.Context { return requestContext(plane, "default") }

// requestContext is what the handler chain gives a Service request.
func requestContext(plane, namespace string) context.Context {
	ctx := genericapirequest.WithNamespace(context.Background(), namespace)
	ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{IsResourceRequest: true,
		APIVersion: "v1", Resource: "services", Namespace: namespace})
	return planes.WithPlane(ctx, plane)
}

// newService is a Service as the API's defaulting leaves it.
func newService(name, namespace string, nodePort bool) *api.Service {
	cluster := api.ServiceInternalTrafficPolicyCluster
	svc := &api.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: api.ServiceSpec{Type: api.ServiceTypeClusterIP, SessionAffinity: api.ServiceAffinityNone, InternalTrafficPolicy: &cluster,
			Ports: []api.ServicePort{{Name: "http", Port: 80, Protocol: api.ProtocolTCP, TargetPort: intstr.FromInt32(80)}}}}
	if nodePort {
		svc.Spec.Type = api.ServiceTypeNodePort
		svc.Spec.ExternalTrafficPolicy = api.ServiceExternalTrafficPolicyCluster
	}
	return svc
}

// createAtOnce creates the Services named prefix-0.. in namespace
// concurrently, in turn through each server; every other one is a
// NodePort Service.
func createAtOnce(t *testing.T, servers []*REST, plane, namespace, prefix string, n int) []*api.Service {
	t.Helper()
	out := make([]*api.Service, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			obj, err := servers[i%len(servers)].Create(requestContext(plane, namespace), newService(fmt.Sprintf("%s-%d", prefix, i), namespace, i%2 == 1),
				rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
			errs[i] = err
			if err == nil {
				out[i] = obj.(*api.Service)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s-%d: %v", prefix, i, err)
		}
	}
	return out
}

func assertDistinct(t *testing.T, svcs []*api.Service) {
	t.Helper()
	seen := map[string]string{}
	for _, svc := range svcs {
		addrs := []string{svc.Spec.ClusterIP}
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				addrs = append(addrs, fmt.Sprint(p.NodePort))
			}
		}
		if svc.Spec.Type == api.ServiceTypeNodePort && len(addrs) != 2 {
			t.Fatalf("NodePort Service %s got no node port", svc.Name)
		}
		for _, a := range addrs {
			if other, dup := seen[a]; dup {
				t.Fatalf("%s handed to %s and %s", a, other, svc.Name)
			}
			seen[a] = svc.Name
		}
	}
}

// assertRecords lists every plane's records as the server's watch cache
// (if any) holds them, and fails unless their keys end in want.
func assertRecords(t *testing.T, r *REST, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(planes.WithAllPlanes(context.Background()), 30*time.Second)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list := &rangeAllocationList{}
		if err := r.records.store.GetList(ctx, r.records.prefix, storage.ListOptions{ResourceVersion: "0", Recursive: true,
			Predicate: storage.Everything}, list); err != nil {
			return false, err
		}
		var got []string
		for _, rec := range list.Items {
			got = append(got, "/"+planes.OfObject(&rec)+"/"+rec.Name)
		}
		sort.Strings(got)
		return strings.Join(got, " ") == strings.Join(want, " "), nil
	})
	if err != nil {
		t.Fatalf("the records listed are not %v: %v", want, err)
	}
}

// usedIPs is the count of addresses the plane's cluster IP record holds.
func usedIPs(t *testing.T, r *REST, plane, cidr string) int {
	t.Helper()
	rec := &api.RangeAllocation{}
	if err := r.records.store.Get(planeContext(plane), r.records.key(clusterIPsRecord), storage.GetOptions{}, rec); err != nil {
		t.Fatal(err)
	}
	_, ipnet, _ := net.ParseCIDR(cidr)
	ips, err := ipallocator.NewInMemory(ipnet)
	if err != nil {
		t.Fatal(err)
	}
	if err := ips.Restore(ipnet, rec.Data); err != nil {
		t.Fatal(err)
	}
	return ips.Used()
}

// Two servers on one datastore, each with its own storage, allocate from
// the plane's records: 200 Services created at once through both in a
// range of 254 addresses never share an address, releases through either
// server free them, and a plane whose record is gone starts again from
// its Services rather than from an empty range. Records straight on the
// datastore (as the server keeps them) and behind a watch cache (whose
// possibly stale copy of a record is where a swap starts).
func TestRecordsKeepAddressesDistinctAcrossServers(t *testing.T) {
	for name, uncached := range map[string]bool{"uncached": true, "cached": false} {
		t.Run(name, func(t *testing.T) { recordsAcrossServers(t, uncached) })
	}
}

func recordsAcrossServers(t *testing.T, uncached bool) {
	const cidr = "10.0.0.0/24"
	endpoints := startDatastore(t)
	servers := []*REST{newServer(t, endpoints, cidr, uncached), newServer(t, endpoints, cidr, uncached)}

	created := createAtOnce(t, servers, "p", "default", "s", 200)
	assertDistinct(t, created)
	if used := usedIPs(t, servers[0], "p", cidr); used != 200 {
		t.Fatalf("the record holds %d addresses, want 200", used)
	}
	// Another plane has records of its own: the same addresses again.
	other := createAtOnce(t, servers, "q", "default", "s", 20)
	assertDistinct(t, other)
	assertRecords(t, servers[1], "/p/clusterips", "/p/nodeports", "/q/clusterips", "/q/nodeports")

	// Releases through the server that did not allocate.
	for i := 0; i < 50; i++ {
		if _, _, err := servers[(i+1)%2].Delete(planeContext("p"), fmt.Sprintf("s-%d", i), rest.ValidateAllObjectFunc, &metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if used := usedIPs(t, servers[1], "p", cidr); used != 150 {
		t.Fatalf("after 50 deletes the record holds %d addresses, want 150", used)
	}

	// Without its record (a plane from before records were kept) the
	// plane starts from its 150 Services, whatever their namespace: the
	// 104 free addresses are handed out to Services of another
	// namespace, no taken one, and the 105th is refused.
	for _, name := range []string{clusterIPsRecord, nodePortsRecord} {
		if err := servers[0].records.store.Delete(planeContext("p"), servers[0].records.key(name), &api.RangeAllocation{}, nil,
			storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	more := createAtOnce(t, servers, "p", "other", "again", 104)
	all := append(more, created[50:]...)
	assertDistinct(t, all)
	_, err := servers[0].Create(planeContext("p"), newService("full", "default", false), rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err == nil {
		t.Fatal("a 255th address was handed out of a range of 254")
	}
}
