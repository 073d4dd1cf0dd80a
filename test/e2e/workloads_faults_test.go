package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/test/e2e/framework"
)

// setFaults sets plane's faults on its Plane in root (a JSON array).
func setFaults(t *testing.T, s *framework.Server, plane, faults string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"simulation":{"faults":%s}}}`, faults)
	if _, err := s.Dynamic(t, "root").Resource(planesGVR).Patch(t.Context(), plane, types.MergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("setting the faults of %s: %v", plane, err)
	}
}

// TestWorkloadsFaults: faults set on a Plane in root strike the pods that
// match them; the plane's own admin cannot see them; fixing the spec, or
// lifting the fault, cures the pods.
func TestWorkloadsFaults(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "faults")
	createPlane(t, s, plane, "")
	setFaults(t, s, plane, `[
		{"type": "CrashLoopBackOff", "match": {"image": "*:broken"}, "exitCode": 3},
		{"type": "ImagePullBackOff", "match": {"image": "*does-not-exist*"}},
		{"type": "CrashLoopBackOff", "match": {"podLabels": {"job-name": "doomed"}}}
	]`)
	c := s.Client(t, plane)

	// The plane's admin has no way to the faults.
	if out, err := s.Kubectl(t, plane, "", "get", "planes.kplane.dev"); err == nil {
		t.Fatalf("the plane's admin can list Planes: %s", out)
	}

	s.MustKubectl(t, plane, "", "create", "deployment", "web", "--image=nginx:broken", "--replicas=2")
	framework.Eventually(t, 2*framework.DefaultTimeout, "web's pods in CrashLoopBackOff, restarted twice", func(ctx context.Context) error {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 2 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		for _, p := range pods.Items {
			st := p.Status.ContainerStatuses
			if len(st) != 1 || st[0].RestartCount < 2 || st[0].State.Waiting == nil || st[0].State.Waiting.Reason != "CrashLoopBackOff" {
				return fmt.Errorf("pod %s: %+v", p.Name, st)
			}
			if last := st[0].LastTerminationState.Terminated; last == nil || last.ExitCode != 3 {
				return fmt.Errorf("pod %s: last termination %+v, want exit code 3", p.Name, last)
			}
			if podReady(&p) {
				return fmt.Errorf("pod %s is Ready while it crashes", p.Name)
			}
		}
		return nil
	})
	if out, err := s.Kubectl(t, plane, "", "get", "pods"); err != nil || !strings.Contains(out, "CrashLoopBackOff") {
		t.Errorf("kubectl get pods shows no CrashLoopBackOff: %v\n%s", err, out)
	}
	if out, err := s.Kubectl(t, plane, "", "logs", "deployment/web", "--previous"); err != nil || !strings.Contains(out, "simulated") {
		t.Errorf("logs --previous of a crashed container: %v\n%s", err, out)
	}
	s.MustKubectl(t, plane, "", "set", "image", "deployment/web", "nginx=nginx:1.27")
	rollout(t, s, plane, "web")

	// An image that cannot be pulled keeps its pod Pending until the fault
	// is lifted.
	if _, err := c.CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "puller"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example/does-not-exist:1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "puller Pending in ImagePullBackOff", func(ctx context.Context) error {
		p, err := c.CoreV1().Pods("default").Get(ctx, "puller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := p.Status.ContainerStatuses
		if p.Status.Phase != corev1.PodPending || len(st) != 1 || st[0].State.Waiting == nil || st[0].State.Waiting.Reason != "ImagePullBackOff" {
			return fmt.Errorf("phase %s, statuses %+v", p.Status.Phase, st)
		}
		return nil
	})

	// A Job whose pods crash reaches Failed after its backoffLimit.
	backoffLimit := int32(1)
	if _, err := c.BatchV1().Jobs("default").Create(t.Context(), &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "doomed"},
		Spec: batchv1.JobSpec{BackoffLimit: &backoffLimit, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "trainer:1"}},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	setFaults(t, s, plane, `[{"type": "CrashLoopBackOff", "match": {"podLabels": {"job-name": "doomed"}}}]`)
	framework.Eventually(t, framework.DefaultTimeout, "puller running once its fault is lifted", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "!app,!job-name", 1, "registry.example/does-not-exist:1")
		return err
	})
	if out, err := s.Kubectl(t, plane, "", "wait", "--for=condition=Failed", "job/doomed",
		"--timeout="+(2*framework.DefaultTimeout).String()); err != nil {
		t.Fatalf("kubectl wait job/doomed Failed: %v\n%s", err, out)
	}
}

// TestWorkloadsPlaneRunDuration: a plane's runDuration (on its Plane in
// root) sets how long its Jobs' pods run, and a change applies to pods
// already running.
func TestWorkloadsPlaneRunDuration(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "run-duration")
	createPlane(t, s, plane, "")
	patch := func(d string) {
		t.Helper()
		if _, err := s.Dynamic(t, "root").Resource(planesGVR).Patch(t.Context(), plane, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"simulation":{"runDuration":%q}}}`, d)), metav1.PatchOptions{}); err != nil {
			t.Fatalf("runDuration %s: %v", d, err)
		}
	}
	patch("1h")
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, "", "create", "job", "long", "--image=trainer:1")
	framework.Eventually(t, framework.DefaultTimeout, "job long's pod running", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "job-name=long", 1, "trainer:1")
		return err
	})
	// The server's default (1 s) would have completed it by now.
	framework.Consistently(t, 3*time.Second, "job long still running", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "job-name=long", 1, "trainer:1")
		return err
	})
	patch("100ms")
	if out, err := s.Kubectl(t, plane, "", "wait", "--for=condition=Complete", "job/long",
		"--timeout="+framework.DefaultTimeout.String()); err != nil {
		t.Fatalf("job long after runDuration 100ms: %v\n%s", err, out)
	}
	if _, err := s.Dynamic(t, "root").Resource(planesGVR).Patch(t.Context(), plane, types.MergePatchType,
		[]byte(`{"spec":{"simulation":{"runDuration":"soon"}}}`), metav1.PatchOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("runDuration soon: want 422, got %v", err)
	}
}

// TestWorkloadsReadyDelay: a plane's readyDelay keeps its pods Running and
// not Ready (a Deployment not Available) until it has passed, a change
// applies to pods already running, a pod's kplane.dev/ready-delay
// annotation wins, and a Job's pod completes whether or not it was ever
// ready.
func TestWorkloadsReadyDelay(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "ready-delay")
	createPlane(t, s, plane, "")
	patch := func(d string) error {
		_, err := s.Dynamic(t, "root").Resource(planesGVR).Patch(t.Context(), plane, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"simulation":{"readyDelay":%q}}}`, d)), metav1.PatchOptions{})
		return err
	}
	if err := patch("1h"); err != nil {
		t.Fatal(err)
	}
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, "", "create", "deployment", "web", "--image=nginx", "--replicas=2")
	warmingUp := func(ctx context.Context) error {
		list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		if len(list.Items) != 2 {
			return fmt.Errorf("%d pods, want 2", len(list.Items))
		}
		for _, p := range list.Items {
			st := p.Status.ContainerStatuses
			if p.Status.Phase != corev1.PodRunning || podReady(&p) || len(st) != 1 || st[0].Ready ||
				st[0].State.Running == nil || st[0].Started == nil || !*st[0].Started {
				return fmt.Errorf("pod %s: phase %s, ready %t, statuses %+v", p.Name, p.Status.Phase, podReady(&p), st)
			}
		}
		d, err := c.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != 0 || d.Status.AvailableReplicas != 0 {
			return fmt.Errorf("deployment web: %d ready, %d available", d.Status.ReadyReplicas, d.Status.AvailableReplicas)
		}
		return nil
	}
	framework.Eventually(t, framework.DefaultTimeout, "web's pods running, not ready", warmingUp)
	framework.Consistently(t, 2*time.Second, "web's pods still not ready", warmingUp)
	if err := patch("100ms"); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Kubectl(t, plane, "", "rollout", "status", "deployment/web", "--timeout="+framework.DefaultTimeout.String()); err != nil {
		t.Fatalf("rollout of web after readyDelay 100ms: %v\n%s", err, out)
	}

	// The annotation wins over the plane's 100 ms: not ready before 2 s.
	created := time.Now()
	if _, err := c.CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "slow", Labels: map[string]string{"role": "slow"},
			Annotations: map[string]string{"kplane.dev/ready-delay": "2s"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "nginx"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "pod slow ready", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "role=slow", 1, "nginx")
		return err
	})
	if waited := time.Since(created); waited < 2*time.Second {
		t.Fatalf("pod slow was ready %s after its create, before its 2 s ready delay", waited)
	}

	// A Job's pod that would be ready in an hour completes after its run.
	s.MustKubectl(t, plane, "", "create", "job", "once", "--image=trainer:1")
	if err := patch("1h"); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Kubectl(t, plane, "", "wait", "--for=condition=Complete", "job/once",
		"--timeout="+framework.DefaultTimeout.String()); err != nil {
		t.Fatalf("job once with readyDelay 1h: %v\n%s", err, out)
	}
	if err := patch("soon"); !apierrors.IsInvalid(err) {
		t.Fatalf("readyDelay soon: want 422, got %v", err)
	}
}

// nodeReadyTaints reports whether plane's node is Ready and whether it
// carries the not-ready taints.
func nodeReadyTaints(ctx context.Context, c kubernetes.Interface, name string) (ready, tainted bool, err error) {
	node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, false, err
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady {
			tainted = true
		}
	}
	return nodeReady(node), tainted, nil
}

// TestWorkloadsNodeNotReady: a NodeNotReady fault takes a node out (not
// Ready, tainted, no new Pods, its Pods not ready); lifting it brings the
// node and its Pods back.
func TestWorkloadsNodeNotReady(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "node-down")
	createPlane(t, s, plane, "")
	if _, err := s.Dynamic(t, "root").Resource(planesGVR).Patch(t.Context(), plane, types.MergePatchType, []byte(
		`{"spec":{"simulation":{"nodes":{"count":2},"faults":[{"type":"NodeNotReady","match":{"node":"kplane-node-0"}}]}}}`,
	), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, "", "create", "deployment", "web", "--image=nginx:1.27", "--replicas=3")
	rollout(t, s, plane, "web")
	pods, err := runningPods(t.Context(), c, "default", "app=web", 3, "nginx:1.27")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Spec.NodeName != "kplane-node-1" {
			t.Errorf("pod %s scheduled to %s, a node that is not ready", p.Name, p.Spec.NodeName)
		}
	}
	if ready, tainted, err := nodeReadyTaints(t.Context(), c, "kplane-node-0"); err != nil || ready || !tainted {
		t.Fatalf("kplane-node-0: ready %v tainted %v (%v), want not ready and tainted", ready, tainted, err)
	}

	// Now node-1 goes down too, and node-0 comes back.
	setFaults(t, s, plane, `[{"type": "NodeNotReady", "match": {"node": "kplane-node-1"}}]`)
	framework.Eventually(t, framework.DefaultTimeout, "node-0 back, node-1 down, web's pods not ready", func(ctx context.Context) error {
		if ready, tainted, err := nodeReadyTaints(ctx, c, "kplane-node-0"); err != nil || !ready || tainted {
			return fmt.Errorf("kplane-node-0: ready %v tainted %v (%v)", ready, tainted, err)
		}
		if ready, tainted, err := nodeReadyTaints(ctx, c, "kplane-node-1"); err != nil || ready || !tainted {
			return fmt.Errorf("kplane-node-1: ready %v tainted %v (%v)", ready, tainted, err)
		}
		list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Spec.NodeName == "kplane-node-1" && podReady(&p) {
				return fmt.Errorf("pod %s on the down node is ready", p.Name)
			}
		}
		return nil
	})
	setFaults(t, s, plane, `[]`)
	framework.Eventually(t, framework.DefaultTimeout, "every pod ready again", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "app=web", 3, "nginx:1.27")
		return err
	})
}
