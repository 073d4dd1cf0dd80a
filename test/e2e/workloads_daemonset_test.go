package e2e

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kplane.dev/kplane/test/e2e/framework"
)

const daemonSetAgent = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: fluent-bit}]
`

// TestWorkloadsDaemonSet: a DaemonSet runs one Pod on each of its plane's
// nodes (bringing the nodes into being), rolls out a new image, and its
// Pods go with it; the same DaemonSet in another plane is that plane's.
func TestWorkloadsDaemonSet(t *testing.T) {
	t.Parallel()
	s := shared
	a, b := uniquePlane(t, "ds-a"), uniquePlane(t, "ds-b")
	for _, plane := range []string{a, b} {
		s.MustKubectl(t, plane, daemonSetAgent, "apply", "-f", "-")
	}
	for _, plane := range []string{a, b} {
		timeout := "--timeout=" + framework.DefaultTimeout.String()
		if out, err := s.Kubectl(t, plane, "", "rollout", "status", "daemonset/agent", timeout); err != nil {
			t.Fatalf("plane %s: kubectl rollout status daemonset/agent: %v\n%s", plane, err, out)
		}
		c := s.Client(t, plane)
		framework.Eventually(t, framework.DefaultTimeout, "plane "+plane+": one agent Pod on each node", func(ctx context.Context) error {
			pods, err := runningPods(ctx, c, "default", "app=agent", 3, "fluent-bit")
			if err != nil {
				return err
			}
			nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			on := map[string]int{}
			for _, p := range pods {
				on[p.Spec.NodeName]++
			}
			for _, n := range nodes.Items {
				if on[n.Name] != 1 {
					return fmt.Errorf("node %s runs %d agent pods (pods by node: %v)", n.Name, on[n.Name], on)
				}
			}
			if len(nodes.Items) != 3 {
				return fmt.Errorf("%d nodes, want 3", len(nodes.Items))
			}
			return nil
		})
	}

	ca := s.Client(t, a)
	s.MustKubectl(t, a, "", "set", "image", "daemonset/agent", "agent=fluent-bit:3")
	timeout := "--timeout=" + framework.DefaultTimeout.String()
	if out, err := s.Kubectl(t, a, "", "rollout", "status", "daemonset/agent", timeout); err != nil {
		t.Fatalf("rollout of the new image: %v\n%s", err, out)
	}
	framework.Eventually(t, framework.DefaultTimeout, "plane a: 3 agent Pods of fluent-bit:3", func(ctx context.Context) error {
		_, err := runningPods(ctx, ca, "default", "app=agent", 3, "fluent-bit:3")
		return err
	})
	if _, err := runningPods(t.Context(), s.Client(t, b), "default", "app=agent", 3, "fluent-bit"); err != nil {
		t.Fatalf("plane b changed with plane a: %v", err)
	}

	s.MustKubectl(t, a, "", "delete", "daemonset/agent")
	framework.Eventually(t, framework.DefaultTimeout, "plane a: the agent Pods go with their DaemonSet", func(ctx context.Context) error {
		pods, err := ca.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 0 {
			return fmt.Errorf("%d agent pods left", len(pods.Items))
		}
		return nil
	})
}
