package services

import (
	"context"
	"net"
	"testing"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"
	"k8s.io/kubernetes/pkg/registry/core/service/portallocator"
)

// A plane's record on the real datastore, changed under its Services as a
// server that died mid-create (a leak) or a lost write (a loss) would
// leave it: the repair frees the leaked address and port on the
// LeakSightings-th pass in a row and not before, takes the lost address
// again on its first pass, and leaves another plane's record as it was.
func TestRepairFreesLeaksAndRetakesLosses(t *testing.T) {
	const cidr = "10.0.0.0/24"
	r := newServer(t, startDatastore(t), cidr, true)
	svcs := createAtOnce(t, []*REST{r}, "p", "default", "s", 4)
	createAtOnce(t, []*REST{r}, "q", "default", "s", 2)

	_, ipnet, _ := net.ParseCIDR(cidr)
	ips, err := ipallocator.New(ipnet, r.recordFactory("p", clusterIPsRecord, r.seedClusterIPs))
	if err != nil {
		t.Fatal(err)
	}
	portRange, _ := utilnet.ParsePortRange("30000-32767")
	ports, err := portallocator.New(*portRange, r.recordFactory("p", nodePortsRecord, r.seedNodePorts))
	if err != nil {
		t.Fatal(err)
	}
	// The Services took random addresses: a fixed leaked one could be
	// one of theirs, so the leak takes whatever is free.
	leakedIP, err := ips.AllocateNext()
	if err != nil {
		t.Fatal(err)
	}
	leakedPort, err := ports.AllocateNext()
	if err != nil {
		t.Fatal(err)
	}
	lostIP := net.ParseIP(svcs[0].Spec.ClusterIP)
	if err := ips.Release(lostIP); err != nil {
		t.Fatal(err)
	}
	qUsed := usedIPs(t, r, "q", cidr)

	repair := r.NewRepair(0)
	for pass := 1; pass <= LeakSightings; pass++ {
		if err := repair.Pass(context.Background()); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		if !ips.Has(lostIP) {
			t.Fatalf("after pass %d the address of Service %s is still free in the record", pass, svcs[0].Name)
		}
		freed := pass == LeakSightings
		if ips.Has(leakedIP) == freed || ports.Has(leakedPort) == freed {
			t.Fatalf("after pass %d of %d: leaked address held %v, leaked port held %v", pass, LeakSightings,
				ips.Has(leakedIP), ports.Has(leakedPort))
		}
	}
	for _, svc := range svcs {
		if !ips.Has(net.ParseIP(svc.Spec.ClusterIP)) {
			t.Fatalf("the repair freed %s of Service %s", svc.Spec.ClusterIP, svc.Name)
		}
	}
	if used := usedIPs(t, r, "q", cidr); used != qUsed {
		t.Fatalf("plane q's record holds %d addresses, had %d", used, qUsed)
	}
}
