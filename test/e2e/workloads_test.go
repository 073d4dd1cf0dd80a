package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/test/e2e/framework"
)

// runningPods returns the pods matching selector once exactly want of them
// run, ready, with an IP, on a node, with image; else an error saying what
// is missing.
func runningPods(ctx context.Context, c kubernetes.Interface, ns, selector string, want int, image string) ([]corev1.Pod, error) {
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var running []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			return nil, fmt.Errorf("pod %s still terminating", p.Name)
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.Spec.NodeName == "" || !podReady(&p) {
			return nil, fmt.Errorf("pod %s: phase %s ip %q node %q", p.Name, p.Status.Phase, p.Status.PodIP, p.Spec.NodeName)
		}
		if image != "" && p.Spec.Containers[0].Image != image {
			return nil, fmt.Errorf("pod %s runs %s, not %s", p.Name, p.Spec.Containers[0].Image, image)
		}
		running = append(running, p)
	}
	if len(running) != want {
		return nil, fmt.Errorf("%d pods running, want %d", len(running), want)
	}
	return running, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rollout runs `kubectl rollout status` and fails the test if it does not
// succeed within the default timeout.
func rollout(t *testing.T, s *framework.Server, plane, deployment string) {
	t.Helper()
	timeout := fmt.Sprintf("--timeout=%s", framework.DefaultTimeout)
	if out, err := s.Kubectl(t, plane, "", "rollout", "status", "deployment/"+deployment, timeout); err != nil {
		t.Fatalf("kubectl rollout status %s: %v\n%s", deployment, err, out)
	}
}

// TestWorkloadsDeployment: what `kubectl create deployment` promises on a
// cluster: Pods that run on nodes with IPs, rollouts, scaling, undo,
// a Service's endpoints, graceful deletion that completes.
func TestWorkloadsDeployment(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "workloads")
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, "", "create", "deployment", "web", "--image=nginx", "--replicas=3")
	rollout(t, s, plane, "web")
	pods, err := runningPods(t.Context(), c, "default", "app=web", 3, "nginx")
	if err != nil {
		t.Fatalf("after rollout status: %v", err)
	}
	nodes, err := c.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range nodes.Items {
		names[n.Name] = true
		if n.Status.Allocatable.Cpu().IsZero() || !nodeReady(&n) {
			t.Errorf("node %s: not Ready or no capacity: %+v", n.Name, n.Status)
		}
	}
	if len(nodes.Items) != 3 {
		t.Fatalf("%d nodes, want 3", len(nodes.Items))
	}
	for _, p := range pods {
		if !names[p.Spec.NodeName] || !strings.HasPrefix(p.Status.PodIP, "10.244.") {
			t.Errorf("pod %s on %q with IP %s", p.Name, p.Spec.NodeName, p.Status.PodIP)
		}
	}

	t.Run("set image", func(t *testing.T) {
		s.MustKubectl(t, plane, "", "set", "image", "deployment/web", "nginx=nginx:1.27")
		rollout(t, s, plane, "web")
		framework.Eventually(t, framework.DefaultTimeout, "3 pods of nginx:1.27", func(ctx context.Context) error {
			_, err := runningPods(ctx, c, "default", "app=web", 3, "nginx:1.27")
			return err
		})
	})
	t.Run("scale", func(t *testing.T) {
		s.MustKubectl(t, plane, "", "scale", "deployment/web", "--replicas=5")
		rollout(t, s, plane, "web")
		framework.Eventually(t, framework.DefaultTimeout, "5 pods", func(ctx context.Context) error {
			_, err := runningPods(ctx, c, "default", "app=web", 5, "nginx:1.27")
			return err
		})
	})
	t.Run("undo", func(t *testing.T) {
		s.MustKubectl(t, plane, "", "rollout", "undo", "deployment/web")
		rollout(t, s, plane, "web")
		framework.Eventually(t, framework.DefaultTimeout, "5 pods of nginx again", func(ctx context.Context) error {
			_, err := runningPods(ctx, c, "default", "app=web", 5, "nginx")
			return err
		})
	})
	t.Run("service endpoints", func(t *testing.T) {
		s.MustKubectl(t, plane, "", "expose", "deployment/web", "--port=80")
		framework.Eventually(t, framework.DefaultTimeout, "EndpointSlice of web lists the ready pod IPs", func(ctx context.Context) error {
			return endpointsMatch(ctx, c, "default", "web", "app=web")
		})
	})
	t.Run("graceful deletion completes", func(t *testing.T) {
		victim := pods[0].Name
		if out, err := s.Kubectl(t, plane, "", "delete", "pod", "-l", "app=web", "--wait=true",
			"--timeout="+framework.DefaultTimeout.String()); err != nil {
			t.Fatalf("kubectl delete pod: %v\n%s", err, out)
		}
		framework.Eventually(t, framework.DefaultTimeout, "5 new pods, none terminating", func(ctx context.Context) error {
			running, err := runningPods(ctx, c, "default", "app=web", 5, "nginx")
			for _, p := range running {
				if p.Name == victim {
					return fmt.Errorf("pod %s is still there", victim)
				}
			}
			return err
		})
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// endpointsMatch checks that the Service's EndpointSlices list exactly the
// IPs of the ready pods matching selector.
func endpointsMatch(ctx context.Context, c kubernetes.Interface, ns, service, selector string) error {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err
	}
	var want []string
	for _, p := range pods.Items {
		if podReady(&p) && p.DeletionTimestamp == nil {
			want = append(want, p.Status.PodIP)
		}
	}
	slices, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return err
	}
	var got []string
	for _, slice := range slices.Items {
		for _, e := range slice.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				got = append(got, e.Addresses...)
			}
		}
	}
	sort.Strings(want)
	sort.Strings(got)
	if len(want) == 0 || strings.Join(got, ",") != strings.Join(want, ",") {
		return fmt.Errorf("endpoints %v, ready pod IPs %v", got, want)
	}
	return nil
}

const jobFive = `apiVersion: batch/v1
kind: Job
metadata: {name: five}
spec:
  completions: 5
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox, command: ["true"]}]
`

// TestWorkloadsJob: a Job's pods run to completion, at most parallelism at
// a time, and the Job completes.
func TestWorkloadsJob(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "jobs")
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, jobFive, "apply", "-f", "-")
	if out, err := s.Kubectl(t, plane, "", "wait", "--for=condition=Complete", "job/five",
		"--timeout="+(2*framework.DefaultTimeout).String()); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out)
	}
	pods, err := c.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "job-name=five"})
	if err != nil {
		t.Fatal(err)
	}
	succeeded := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded {
			succeeded++
			if p.Status.ContainerStatuses[0].State.Terminated == nil || p.Status.ContainerStatuses[0].State.Terminated.ExitCode != 0 {
				t.Errorf("pod %s: container status %+v", p.Name, p.Status.ContainerStatuses)
			}
		}
	}
	job, err := c.BatchV1().Jobs("default").Get(t.Context(), "five", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if succeeded != 5 || job.Status.Succeeded != 5 {
		t.Fatalf("%d pods and job status %d succeeded, want 5", succeeded, job.Status.Succeeded)
	}
}

// TestWorkloadsIsolation: same-named Deployments in two planes progress
// independently; deleting one plane leaves the other alone, and the id
// created again starts with nothing of the old plane.
func TestWorkloadsIsolation(t *testing.T) {
	t.Parallel()
	s := shared
	a, b := uniquePlane(t, "iso-a"), uniquePlane(t, "iso-b")
	s.MustKubectl(t, a, "", "create", "deployment", "web", "--image=nginx", "--replicas=2")
	s.MustKubectl(t, b, "", "create", "deployment", "web", "--image=httpd", "--replicas=4")
	rollout(t, s, a, "web")
	rollout(t, s, b, "web")
	ca, cb := s.Client(t, a), s.Client(t, b)
	framework.Eventually(t, framework.DefaultTimeout, "plane a: 2 nginx pods", func(ctx context.Context) error {
		_, err := runningPods(ctx, ca, "default", "app=web", 2, "nginx")
		return err
	})
	framework.Eventually(t, framework.DefaultTimeout, "plane b: 4 httpd pods", func(ctx context.Context) error {
		_, err := runningPods(ctx, cb, "default", "app=web", 4, "httpd")
		return err
	})
	s.MustKubectl(t, b, "", "scale", "deployment/web", "--replicas=1")
	rollout(t, s, b, "web")
	framework.Eventually(t, framework.DefaultTimeout, "plane b: 1 pod, plane a still 2", func(ctx context.Context) error {
		if _, err := runningPods(ctx, cb, "default", "app=web", 1, "httpd"); err != nil {
			return err
		}
		_, err := runningPods(ctx, ca, "default", "app=web", 2, "nginx")
		return err
	})

	if out, err := kplaneCmd(t, s, "planes", "delete", a); err != nil {
		t.Fatalf("kplane planes delete: %v\n%s", err, out)
	}
	planes := s.Dynamic(t, "root").Resource(planeGVR)
	eventually(t, framework.DefaultTimeout, "plane "+a+" deleted", func() (bool, error) {
		_, err := planes.Get(t.Context(), a, metav1.GetOptions{})
		return gone(err)
	})
	// The same id again is a new, empty plane: no nodes, no pods.
	ca = s.Client(t, a)
	for _, what := range []struct {
		name string
		list func(context.Context) (int, error)
	}{
		{"nodes", func(ctx context.Context) (int, error) {
			l, err := ca.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return len(l.Items), err
		}},
		{"pods", func(ctx context.Context) (int, error) {
			l, err := ca.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return len(l.Items), err
		}},
	} {
		if n, err := what.list(t.Context()); err != nil || n != 0 {
			t.Fatalf("plane %s created again holds %d %s (%v)", a, n, what.name, err)
		}
	}
	s.MustKubectl(t, b, "", "scale", "deployment/web", "--replicas=3")
	rollout(t, s, b, "web")
	s.MustKubectl(t, a, "", "create", "deployment", "web", "--image=nginx", "--replicas=1")
	rollout(t, s, a, "web")
	// What the controllers wrote to the plane while it was deleted was
	// refused as writes to a terminating namespace: no error lines.
	if refused := linesWith(linesWith(s.Log(), "Server rejected event"), a+"|"); refused != "" {
		t.Errorf("events of deleted plane %s logged as errors:\n%s", a, refused)
	}
}

// TestWorkloadsRestart: a server killed mid-rollout converges after a
// restart: the controllers start over from what is stored.
func TestWorkloadsRestart(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	plane := "restart"
	s.MustKubectl(t, plane, "", "create", "deployment", "web", "--image=nginx", "--replicas=3")
	rollout(t, s, plane, "web")
	s.MustKubectl(t, plane, "", "set", "image", "deployment/web", "nginx=nginx:1.27")
	s.Kill()
	s.Restart(t)
	rollout(t, s, plane, "web")
	c := s.Client(t, plane)
	framework.Eventually(t, framework.DefaultTimeout, "3 pods of nginx:1.27 after kill -9 and restart", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "app=web", 3, "nginx:1.27")
		return err
	})
	nodes, err := c.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 3 {
		t.Fatalf("%d nodes after restart (%v), want the 3 of before", len(nodes.Items), err)
	}
}

// TestWorkloadsOff: --simulation=false keeps planes an API only: a
// Deployment gets no ReplicaSet, a Pod is never scheduled, no node appears.
func TestWorkloadsOff(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{Args: []string{"--simulation=false"}})
	plane := "api-only"
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, "", "create", "deployment", "web", "--image=nginx", "--replicas=3")
	if _, err := c.CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Consistently(t, 3*time.Second, "nothing moves without the simulation", func(ctx context.Context) error {
		sets, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{})
		if err != nil || len(sets.Items) != 0 {
			return fmt.Errorf("replicasets: %d (%v)", len(sets.Items), err)
		}
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 0 {
			return fmt.Errorf("nodes: %d (%v)", len(nodes.Items), err)
		}
		pod, err := c.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending {
			return fmt.Errorf("pod p: node %q phase %s (%v)", pod.Spec.NodeName, pod.Status.Phase, err)
		}
		d, err := c.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || d.Status.Replicas != 0 {
			return fmt.Errorf("deployment status %+v (%v)", d.Status, err)
		}
		return nil
	})
}

// apiOnlyPlane creates plane (or marks the existing one) with the workload
// simulation off, for tests of API-only behaviour that build workload
// objects by hand, and waits until it is ready.
func apiOnlyPlane(t *testing.T, s *framework.Server, plane string) {
	t.Helper()
	planes := s.Dynamic(t, "root").Resource(planeGVR)
	p := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kplane.dev/v1", "kind": "Plane",
		"metadata": map[string]any{"name": plane, "annotations": map[string]any{"kplane.dev/simulation": "false"}}}}
	_, err := planes.Create(t.Context(), p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = planes.Patch(t.Context(), plane, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"kplane.dev/simulation":"false"}}}`), metav1.PatchOptions{})
	}
	if err != nil {
		t.Fatalf("plane %s without simulation: %v", plane, err)
	}
	c := s.Client(t, plane)
	framework.Eventually(t, framework.DefaultTimeout, "plane "+plane+" ready", func(ctx context.Context) error {
		_, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// TestWorkloadsPlaneOff: a Plane annotated kplane.dev/simulation=false (in
// the root plane, out of its tenants' reach) stays an API only while the
// server simulates every other plane.
func TestWorkloadsPlaneOff(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "sim-off")
	apiOnlyPlane(t, s, plane)
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, "", "create", "deployment", "web", "--image=nginx", "--replicas=2")
	framework.Consistently(t, 3*time.Second, "nothing moves in plane "+plane, func(ctx context.Context) error {
		sets, err := c.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{})
		if err != nil || len(sets.Items) != 0 {
			return fmt.Errorf("replicasets: %d (%v)", len(sets.Items), err)
		}
		return nil
	})
}

// TestWorkloadsLogs: `kubectl logs` of a simulated container prints its
// scripted log (the logs.kplane.dev/<container> annotation) or a line
// saying it is simulated; what a kubelet refuses is refused.
func TestWorkloadsLogs(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "logs")
	c := s.Client(t, plane)
	_, err := c.CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "scripted", Annotations: map[string]string{"logs.kplane.dev/main": "starting\nserving on :8080\n"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:1"}, {Name: "side", Image: "proxy:2"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "pod scripted running", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "", 1, "app:1")
		return err
	})
	if out := s.MustKubectl(t, plane, "", "logs", "scripted", "-c", "main"); out != "starting\nserving on :8080\n" {
		t.Errorf("scripted log: %q", out)
	}
	if out := s.MustKubectl(t, plane, "", "logs", "scripted", "-c", "main", "--tail=1"); out != "serving on :8080\n" {
		t.Errorf("--tail=1: %q", out)
	}
	if out := s.MustKubectl(t, plane, "", "logs", "scripted", "-c", "side"); !strings.Contains(out, "simulated") {
		t.Errorf("default log line: %q", out)
	}
	for _, args := range [][]string{{"logs", "scripted", "-c", "main", "--previous"}, {"logs", "scripted", "-c", "nope"}} {
		if out, err := s.Kubectl(t, plane, "", args...); err == nil {
			t.Errorf("kubectl %s: want an error, got %q", strings.Join(args, " "), out)
		}
	}
}

// TestWorkloadsLogsFollow: `kubectl logs -f` of a running container
// streams its log and ends when the container terminates, not before.
func TestWorkloadsLogsFollow(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "logs-follow")
	c := s.Client(t, plane)
	_, err := c.CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "task", Annotations: map[string]string{
			"logs.kplane.dev/main": "epoch 1 loss 0.9\nepoch 2 loss 0.4\n", "kplane.dev/run-duration": "3s",
		}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "trainer:1"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "pod task running", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "", 1, "trainer:1")
		return err
	})
	out := s.MustKubectl(t, plane, "", "logs", "-f", "task")
	if out != "epoch 1 loss 0.9\nepoch 2 loss 0.4\n" {
		t.Errorf("followed log: %q", out)
	}
	pod, err := c.CoreV1().Pods("default").Get(t.Context(), "task", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("logs -f ended while the pod was %s, not after it completed", pod.Status.Phase)
	}
}

// TestWorkloadsCronJob: a CronJob spawns a Job at the next minute, the Job
// completes and ttlSecondsAfterFinished removes it.
func TestWorkloadsCronJob(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "cron")
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, `apiVersion: batch/v1
kind: CronJob
metadata: {name: tick}
spec:
  schedule: "* * * * *"
  jobTemplate:
    spec:
      ttlSecondsAfterFinished: 2
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: tick, image: busybox}]
`, "apply", "-f", "-")
	// The schedule fires at the next minute: up to 60 s plus the run.
	framework.Eventually(t, 90*time.Second+framework.DefaultTimeout, "a Job of tick succeeded", func(ctx context.Context) error {
		cj, err := c.BatchV1().CronJobs("default").Get(ctx, "tick", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cj.Status.LastSuccessfulTime == nil {
			return fmt.Errorf("no successful run yet (last schedule %v)", cj.Status.LastScheduleTime)
		}
		return nil
	})
	framework.Eventually(t, framework.DefaultTimeout, "finished Jobs removed by their TTL", func(ctx context.Context) error {
		jobs, err := c.BatchV1().Jobs("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, j := range jobs.Items {
			for _, cond := range j.Status.Conditions {
				if cond.Type == "Complete" && cond.Status == corev1.ConditionTrue {
					return fmt.Errorf("job %s completed and still there", j.Name)
				}
			}
		}
		return nil
	})
}

// TestWorkloadsUnschedulable: a Pod that fits no node (more cpu than a
// node has, or a nodeSelector no node matches) stays Pending with
// PodScheduled=False/Unschedulable and a FailedScheduling event, as
// upstream; a Pod that tolerates nothing special and asks for little runs.
func TestWorkloadsUnschedulable(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "unsched")
	c := s.Client(t, plane)
	pods := []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "huge"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100")}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "picky"}, Spec: corev1.PodSpec{NodeSelector: map[string]string{"gpu": "a100"},
			Containers: []corev1.Container{{Name: "c", Image: "x"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "small"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}}},
	}
	for _, p := range pods {
		if _, err := c.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, framework.DefaultTimeout, "pod small running", func(ctx context.Context) error {
		p, err := c.CoreV1().Pods("default").Get(ctx, "small", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("small: %v %v", p.Status.Phase, err)
		}
		return nil
	})
	for _, name := range []string{"huge", "picky"} {
		want := map[string]string{"huge": "Insufficient cpu", "picky": "didn't match Pod's node affinity/selector"}[name]
		framework.Eventually(t, framework.DefaultTimeout, "pod "+name+" unschedulable", func(ctx context.Context) error {
			p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
				return framework.Stop(fmt.Errorf("pod %s scheduled to %q (%s)", name, p.Spec.NodeName, p.Status.Phase))
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse &&
					cond.Reason == corev1.PodReasonUnschedulable && strings.Contains(cond.Message, want) {
					events, err := c.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=FailedScheduling"})
					if err != nil || len(events.Items) == 0 {
						return fmt.Errorf("no FailedScheduling event for %s (%v)", name, err)
					}
					return nil
				}
			}
			return fmt.Errorf("pod %s conditions %+v", name, p.Status.Conditions)
		})
	}
}
