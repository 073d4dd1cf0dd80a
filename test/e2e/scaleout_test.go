package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/test/e2e/framework"
)

// startServers starts n kplane servers on one datastore with one join
// token (README, "Several servers"): the later ones take the first's
// credentials from the datastore. The controllers run on one of them at a
// time (their Leases). args go to all.
func startServers(t *testing.T, n int, endpoint string, args ...string) []*framework.Server {
	t.Helper()
	shared := append([]string{"--datastore-endpoint", endpoint, "--join-token", framework.NewJoinToken(t)}, args...)
	servers := make([]*framework.Server, n)
	for i := range servers {
		servers[i] = framework.StartServer(t, framework.Options{Args: shared})
		if i > 0 && (!bytes.Equal(servers[0].CAPEM(), servers[i].CAPEM()) || servers[0].AdminToken() != servers[i].AdminToken()) {
			t.Fatalf("server %d did not join the first: another CA or admin token", i+1)
		}
	}
	return servers
}

// startTwoServers is startServers of two.
func startTwoServers(t *testing.T, endpoint string, args ...string) (one, two *framework.Server) {
	t.Helper()
	servers := startServers(t, 2, endpoint, args...)
	return servers[0], servers[1]
}

func TestServiceAddressesAcrossServersEtcd(t *testing.T) {
	t.Parallel()
	serviceAddressesAcrossServers(t, framework.StartEtcd(t))
}

func TestServiceAddressesAcrossServersPostgres(t *testing.T) {
	t.Parallel()
	serviceAddressesAcrossServers(t, framework.StartPostgres(t))
}

// serviceAddressesAcrossServers: a plane's Service addresses are allocated
// through the datastore, so 200 Services created at once in one plane
// through three servers get 200 distinct ClusterIPs, and the NodePort
// ones distinct node ports. A third of them then go away through another
// server than made them and as many come back: freed addresses are taken
// again and still never twice. The ranges are small (254 addresses, 200 ports) so that
// servers allocating on their own would collide for certain (on the
// defaults they often would not: the earlier in-memory allocators passed).
func serviceAddressesAcrossServers(t *testing.T, endpoint string) {
	servers := startServers(t, 3, endpoint, "--service-cidr", "10.96.0.0/24", "--service-node-port-range", "30000-30199",
		"--simulation=false")
	const plane = "addresses"
	createPlane(t, servers[0], plane, "")
	var clients []*kubernetes.Clientset
	for _, s := range servers {
		clients = append(clients, s.Client(t, plane))
	}
	framework.Eventually(t, framework.DefaultTimeout, "the plane served by every server", func(ctx context.Context) error {
		for _, c := range clients[1:] {
			if _, err := c.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
				return err
			}
		}
		return nil
	})

	created := createServicesAtOnce(t, clients, "s", 200)
	assertDistinctAddresses(t, created)

	// Free a third through the other server than made them, take as many
	// again: the records say what is free, whichever server freed it.
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 200; i += 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- clients[(i+1)%len(clients)].CoreV1().Services("default").Delete(ctx, fmt.Sprintf("s-%d", i), metav1.DeleteOptions{})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	createServicesAtOnce(t, clients, "again", 67)
	all, err := clients[0].CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != 200+1 {
		t.Fatalf("%d Services in the plane, want 200 and default/kubernetes", len(all.Items))
	}
	assertDistinctAddresses(t, all.Items)
}

// createServicesAtOnce creates n Services concurrently, alternating
// between the clients (servers), every other one of type NodePort.
func createServicesAtOnce(t *testing.T, clients []*kubernetes.Clientset, prefix string, n int) []corev1.Service {
	t.Helper()
	ctx := context.Background()
	out := make([]corev1.Service, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			typ := corev1.ServiceTypeClusterIP
			if i%2 == 1 {
				typ = corev1.ServiceTypeNodePort
			}
			// No selector: no controller writes anything for them.
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)},
				Spec: corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Port: 80}}}}
			got, err := clients[i%len(clients)].CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
			if err == nil {
				out[i] = *got
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("creating %s-%d through server %d: %v", prefix, i, i%len(clients)+1, err)
		}
	}
	return out
}

// assertDistinctAddresses fails unless no two Services hold one ClusterIP
// or one node port, and every NodePort Service has its node port.
func assertDistinctAddresses(t *testing.T, svcs []corev1.Service) {
	t.Helper()
	ips, ports := map[string]string{}, map[int32]string{}
	for _, svc := range svcs {
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			t.Fatalf("%s has no ClusterIP", svc.Name)
		}
		if other, dup := ips[svc.Spec.ClusterIP]; dup {
			t.Fatalf("ClusterIP %s allocated to %s and %s", svc.Spec.ClusterIP, other, svc.Name)
		}
		ips[svc.Spec.ClusterIP] = svc.Name
		for _, p := range svc.Spec.Ports {
			if svc.Spec.Type == corev1.ServiceTypeNodePort && p.NodePort == 0 {
				t.Fatalf("NodePort Service %s has no node port", svc.Name)
			}
			if p.NodePort == 0 {
				continue
			}
			if other, dup := ports[p.NodePort]; dup {
				t.Fatalf("node port %d allocated to %s and %s", p.NodePort, other, svc.Name)
			}
			ports[p.NodePort] = svc.Name
		}
	}
}
