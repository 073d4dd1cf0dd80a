// Package nodes gives a plane its simulated nodes on first need: Ready,
// with capacity, a pod CIDR each, and no heartbeat (nothing here runs per
// node or per plane; a node is only an object in the plane).
package nodes

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/simulation/faults"
)

const (
	// SimulatedLabel marks the nodes this package made; the simulated
	// kubelet runs only their pods.
	SimulatedLabel = "kplane.dev/simulated"
	// namePrefix names the simulated nodes: kplane-node-0, -1, ...
	namePrefix = "kplane-node-"
	// MaxCount bounds the nodes of a plane: each takes a /24 of the
	// plane's pod CIDR 10.244.0.0/16 and a host address in 172.20.0.0/16.
	MaxCount = 250
)

// Shape is what every simulated node of a plane looks like.
type Shape struct {
	Count  int
	CPU    resource.Quantity
	Memory resource.Quantity
	Pods   resource.Quantity
	// Extended resources every node offers (e.g. nvidia.com/gpu).
	Extended corev1.ResourceList
	Labels   map[string]string
	Taints   []corev1.Taint
	// KubeletVersion is reported in the node info.
	KubeletVersion string
}

// Spec is a plane's own node shape (Plane spec.simulation.nodes): what it
// sets replaces the server's.
type Spec struct {
	Count             *int32              `json:"count,omitempty"`
	CPU               *resource.Quantity  `json:"cpu,omitempty"`
	Memory            *resource.Quantity  `json:"memory,omitempty"`
	Pods              *resource.Quantity  `json:"pods,omitempty"`
	ExtendedResources corev1.ResourceList `json:"extendedResources,omitempty"`
	Labels            map[string]string   `json:"labels,omitempty"`
	Taints            []corev1.Taint      `json:"taints,omitempty"`
}

// With returns s with what spec sets.
func (s Shape) With(spec *Spec) Shape {
	if spec == nil {
		return s
	}
	if spec.Count != nil && *spec.Count >= 1 && *spec.Count <= MaxCount {
		s.Count = int(*spec.Count)
	}
	for _, q := range []struct {
		from *resource.Quantity
		to   *resource.Quantity
	}{{spec.CPU, &s.CPU}, {spec.Memory, &s.Memory}, {spec.Pods, &s.Pods}} {
		if q.from != nil {
			*q.to = *q.from
		}
	}
	if spec.ExtendedResources != nil {
		s.Extended = spec.ExtendedResources
	}
	if spec.Labels != nil {
		s.Labels = spec.Labels
	}
	if spec.Taints != nil {
		s.Taints = spec.Taints
	}
	return s
}

// DefaultShape is three nodes of 8 CPUs, 32 GiB and 110 pods.
func DefaultShape() Shape {
	return Shape{Count: 3, CPU: resource.MustParse("8"), Memory: resource.MustParse("32Gi"), Pods: resource.MustParse("110")}
}

// Provisioner creates the nodes of a plane.
type Provisioner struct {
	client kubernetes.Interface
	shape  Shape
	// spec returns a plane's own node shape (nil: the server's).
	spec func(plane string) *Spec
	// faults returns a plane's faults: a node made while a NodeNotReady
	// fault strikes it is made not Ready.
	faults func(plane string) []faults.Fault

	mu sync.Mutex
	// creating holds the planes whose nodes are being created.
	creating map[string]bool
}

// NewProvisioner returns a provisioner writing with client (a client that
// addresses the plane in each call's context).
func NewProvisioner(client kubernetes.Interface, shape Shape) (*Provisioner, error) {
	if shape.Count < 1 || shape.Count > MaxCount {
		return nil, fmt.Errorf("simulated nodes per plane must be 1 to %d, not %d", MaxCount, shape.Count)
	}
	return &Provisioner{client: client, shape: shape, creating: map[string]bool{}}, nil
}

// SetFaults sets where the provisioner finds a plane's faults; call it
// before the first Ensure.
func (p *Provisioner) SetFaults(f func(plane string) []faults.Fault) { p.faults = f }

// SetSpecs sets where the provisioner finds a plane's own node shape; call
// it before the first Ensure.
func (p *Provisioner) SetSpecs(spec func(plane string) *Spec) { p.spec = spec }

// Ensure creates plane's nodes (those that exist are left alone). Only one
// call per plane runs at a time; a concurrent one returns at once.
func (p *Provisioner) Ensure(ctx context.Context, plane string) error {
	p.mu.Lock()
	if p.creating[plane] {
		p.mu.Unlock()
		return nil
	}
	p.creating[plane] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.creating, plane)
		p.mu.Unlock()
	}()
	// The nodes are written at once: a plane's first pods wait for them.
	shape := p.shape
	if p.spec != nil {
		shape = shape.With(p.spec(plane))
	}
	g, ctx := errgroup.WithContext(planes.WithPlane(ctx, plane))
	for i := 0; i < shape.Count; i++ {
		g.Go(func() error {
			node := shape.node(i)
			if p.faults != nil {
				SetReady(node, faults.ForNode(p.faults(plane), node.Name))
			}
			_, err := p.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating simulated node %d of plane %s: %w", i, plane, err)
			}
			return nil
		})
	}
	return g.Wait()
}

func (s Shape) node(i int) *corev1.Node {
	name := fmt.Sprintf("%s%d", namePrefix, i)
	now := metav1.NewTime(time.Now())
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: s.CPU, corev1.ResourceMemory: s.Memory, corev1.ResourcePods: s.Pods,
	}
	for r, q := range s.Extended {
		capacity[r] = q
	}
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	// Its own labels win: the kubelet and scheduler rely on them.
	for k, v := range map[string]string{
		SimulatedLabel: "true", corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
	} {
		labels[k] = v
	}
	condition := func(t corev1.NodeConditionType, status corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: status, Reason: reason, Message: message,
			LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{PodCIDR: PodCIDR(i).String(), PodCIDRs: []string{PodCIDR(i).String()}, Taints: s.Taints},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity,
			Phase: corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "simulated node is ready"),
				condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
				condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
				condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: HostIP(i).String()},
				{Type: corev1.NodeHostName, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: s.KubeletVersion,
				ContainerRuntimeVersion: "kplane-simulated://1", OSImage: "kplane simulated node",
			},
		},
	}
}

// PodCIDR is the pod range of the i-th simulated node of a plane.
func PodCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
}

// HostIP is the address of the i-th simulated node of a plane.
func HostIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{172, 20, 0, byte(i + 2)}) }

// The taints upstream's node lifecycle controller puts on a node that is
// not Ready.
var notReadyTaints = []corev1.Taint{
	{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute},
}

// SetReady sets node's Ready condition and not-ready taints as fault
// (nil: none) has them.
func SetReady(node *corev1.Node, fault *faults.Fault) {
	taints := make([]corev1.Taint, 0, len(node.Spec.Taints)+len(notReadyTaints))
	for _, t := range node.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady {
			taints = append(taints, t)
		}
	}
	status, reason, message := corev1.ConditionTrue, "KubeletReady", "simulated node is ready"
	if fault != nil {
		status, reason, message = corev1.ConditionFalse, "KubeletNotReady", "simulated fault: the node is not ready"
		if fault.Message != "" {
			message = fault.Message
		}
		now := metav1.Now()
		for _, t := range notReadyTaints {
			t.TimeAdded = &now
			taints = append(taints, t)
		}
		// A taint's time is kept while it stays.
		for i := range taints {
			for _, old := range node.Spec.Taints {
				if old.Key == taints[i].Key && old.Effect == taints[i].Effect {
					taints[i].TimeAdded = old.TimeAdded
				}
			}
		}
	}
	if len(taints) == 0 {
		taints = nil
	}
	node.Spec.Taints = taints
	for i := range node.Status.Conditions {
		c := &node.Status.Conditions[i]
		if c.Type != corev1.NodeReady || c.Status == status {
			continue
		}
		c.Status, c.Reason, c.Message = status, reason, message
		c.LastTransitionTime = metav1.Now()
	}
}
