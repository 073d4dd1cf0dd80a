package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"kplane.dev/kplane/test/e2e/framework"
)

func service(name, clusterIP string, typ corev1.ServiceType) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:      typ,
			ClusterIP: clusterIP,
			Ports:     []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			Selector:  map[string]string{"app": name},
		},
	}
}

// TestServiceAddressesPerPlane: ClusterIPs and NodePorts are allocated per
// plane. Two planes may hold the same IP; one plane never holds it twice,
// and an address freed by a delete can be taken again.
func TestServiceAddressesPerPlane(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := uniquePlane(t, "svc-a"), uniquePlane(t, "svc-b")
	ca, cb := shared.Client(t, a).CoreV1().Services("default"), shared.Client(t, b).CoreV1().Services("default")

	const ip = "10.96.100.100"
	if _, err := ca.Create(ctx, service("web", ip, corev1.ServiceTypeClusterIP), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create in %s: %v", a, err)
	}
	if _, err := cb.Create(ctx, service("web", ip, corev1.ServiceTypeClusterIP), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the same IP in another plane must be allowed: %v", err)
	}
	_, err := ca.Create(ctx, service("dup", ip, corev1.ServiceTypeClusterIP), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already allocated") {
		t.Fatalf("a second service with %s in one plane: want Invalid 'already allocated', got %v", ip, err)
	}

	// Dynamic allocation never repeats an address inside a plane.
	seen := map[string]string{}
	for i := 0; i < 20; i++ {
		svc, err := ca.Create(ctx, service(fmt.Sprintf("s%d", i), "", corev1.ServiceTypeNodePort), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, addr := range []string{svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].NodePort)} {
			if other, dup := seen[addr]; dup {
				t.Fatalf("%s allocated to %s and %s", addr, other, svc.Name)
			}
			seen[addr] = svc.Name
		}
	}

	// Deleting frees the address in that plane only.
	if err := ca.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Create(ctx, service("web2", ip, corev1.ServiceTypeClusterIP), metav1.CreateOptions{}); err != nil {
		t.Fatalf("reusing a freed IP: %v", err)
	}
	if _, err := cb.Create(ctx, service("dup", ip, corev1.ServiceTypeClusterIP), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("the IP is still held in %s: want Invalid, got %v", b, err)
	}
}

// TestKubeletSubresources: logs, exec, attach, port-forward and proxy need
// a kubelet; a Pod bound to a Node of the tenant's own (not a simulated
// one) has none, so they answer a clear error instead of dialing anything.
func TestKubeletSubresources(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "kubelet")
	ctx := context.Background()
	pods := shared.Client(t, plane).CoreV1().Pods("default")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// kubectl checks the phase before it tries port-forward or exec.
	created.Status.Phase = corev1.PodRunning
	if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A node whose address points at the server itself: it must never be dialed.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
	if _, err := shared.Client(t, plane).CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = pods.GetLogs("p", &corev1.PodLogOptions{}).Do(ctx).Error()
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "no kubelet") {
		t.Fatalf("pods/log: want a clear BadRequest, got %v", err)
	}
	// kubectl --raw paths are absolute: spell out the plane prefix.
	base := "/clusters/" + plane + "/control-plane"
	for _, args := range [][]string{
		{"logs", "p"},
		{"exec", "p", "--", "true"},
		{"port-forward", "pod/p", "18080:80"},
		{"get", "--raw", base + "/api/v1/namespaces/default/pods/p/proxy/"},
		{"get", "--raw", base + "/api/v1/nodes/node-1/proxy/"},
	} {
		out, err := shared.Kubectl(t, plane, "", args...)
		if err == nil || !strings.Contains(out, "no kubelet") {
			t.Errorf("kubectl %s: want a clear error, got %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

// TestServiceRecordsGoWithThePlane: a plane's allocations are records in
// its own keys, written with its first Service and gone with the plane: a
// plane made again under the same id allocates from an empty range. A
// reset drops a member's records with its Services, back to what it
// inherits.
func TestServiceRecordsGoWithThePlane(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	plane := uniquePlane(t, "svc-records")
	createPlane(t, s, plane, "")
	svc := service("web", "10.96.200.200", corev1.ServiceTypeNodePort)
	svc.Spec.Ports[0].NodePort = 31111
	if _, err := s.Client(t, plane).CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	keys := strings.Join(planeKeys(t, s, plane), " ")
	for _, record := range []string{"clusterips", "nodeports"} {
		if !strings.Contains(keys, "/registry/rangeallocations/"+plane+"/"+record) {
			t.Fatalf("no %s record of %s in the datastore: %s", record, plane, keys)
		}
	}
	if out, err := kplaneCmd(t, s, "planes", "delete", plane); err != nil {
		t.Fatalf("kplane planes delete: %v\n%s", err, out)
	}
	if keys := planeKeys(t, s, plane); len(keys) != 0 {
		t.Fatalf("keys of the deleted plane remain: %v", keys)
	}
	createPlane(t, s, plane, "")
	if _, err := s.Client(t, plane).CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the same addresses in the plane made again: %v", err)
	}

	// A member: the template's address stays taken, its own is freed by
	// a reset.
	tmpl, member := uniquePlane(t, "svc-tmpl"), uniquePlane(t, "svc-member")
	createPlane(t, s, tmpl, "")
	if _, err := s.Client(t, tmpl).CoreV1().Services("default").Create(ctx, service("inherited", "10.96.201.1", corev1.ServiceTypeClusterIP), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPlane(t, s, member, tmpl)
	mc := s.Client(t, member).CoreV1().Services("default")
	if _, err := mc.Create(ctx, service("own", "10.96.201.2", corev1.ServiceTypeClusterIP), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := resetPlane(t, s, member); code != http.StatusOK {
		t.Fatalf("reset: HTTP %d", code)
	}
	if _, err := mc.Create(ctx, service("own-again", "10.96.201.2", corev1.ServiceTypeClusterIP), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the member's own address after a reset: %v", err)
	}
	_, err := mc.Create(ctx, service("dup", "10.96.201.1", corev1.ServiceTypeClusterIP), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already allocated") {
		t.Fatalf("the inherited address after a reset: want Invalid 'already allocated', got %v", err)
	}
}

// TestServiceAddressesAcrossRestart: a plane's allocations outlive a
// kill -9 of the server: in a range of six addresses (.1 the kubernetes
// Service's) three Services before and two after take five distinct
// ones, and a sixth is refused as the range is full.
func TestServiceAddressesAcrossRestart(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{Args: []string{"--service-cidr", "10.98.0.0/29"}})
	ctx := context.Background()
	plane := "restart"
	createPlane(t, s, plane, "")
	taken := map[string]string{"10.98.0.1": "kubernetes"}
	create := func(name string) error {
		got, err := s.Client(t, plane).CoreV1().Services("default").Create(ctx, service(name, "", corev1.ServiceTypeNodePort), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		for _, addr := range []string{got.Spec.ClusterIP, fmt.Sprint(got.Spec.Ports[0].NodePort)} {
			if other, dup := taken[addr]; dup {
				t.Fatalf("%s allocated to %s and %s", addr, other, name)
			}
			taken[addr] = name
		}
		return nil
	}
	for i := range 3 {
		if err := create(fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	s.Kill()
	s.Restart(t)
	for i := range 2 {
		if err := create(fmt.Sprintf("after-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := create("one-too-many"); err == nil || !strings.Contains(err.Error(), "range is full") {
		t.Fatalf("a seventh address of a range of six: want 'range is full', got %v", err)
	}
}
