package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kplane.dev/kplane/test/e2e/framework"
)

// launcherVolume is what the task launcher of seed 004 creates for
// `volumes create data-vol 10Gi`.
const launcherVolume = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data-vol-vol12345
  labels: {skypilot-volume: "true", volume-id: vol12345, volume-name: data-vol, username: user-example.com}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 10Gi}}
`

// launcherJob is the Job the launcher creates for node idx of a task.
func launcherJob(task, idx, nodes int, runDuration string) string {
	return fmt.Sprintf(`
apiVersion: batch/v1
kind: Job
metadata:
  name: training-job-%[1]d-node-%[2]d
  labels: {skypilot-task: "true", task-id: "%[1]d", task-name: training-job, username: user-example.com, node-idx: "%[2]d"}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels: {task-id: "%[1]d", node-idx: "%[2]d"}
      annotations:
        kplane.dev/run-duration: %[4]s
        logs.kplane.dev/main: "node %[2]d: epoch 1 loss 0.9\nnode %[2]d: epoch 2 loss 0.4\n"
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: python:3.11
        command: [/bin/sh, -c, "python train.py --data /data --epochs $EPOCHS"]
        env:
        - {name: NODE_RANK, value: "%[2]d"}
        - {name: NUM_NODES, value: "%[3]d"}
        - {name: EPOCHS, value: "100"}
        resources:
          requests: {cpu: "4", memory: 8Gi}
          limits: {cpu: "4", memory: 8Gi, nvidia.com/gpu: "1"}
        volumeMounts: [{name: data, mountPath: /data}]
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: data-vol-vol12345}
`, task, idx, nodes, runDuration)
}

// taskStatus aggregates a task's status from its Jobs, as the launcher does.
func taskStatus(ctx context.Context, s *framework.Server, t *testing.T, plane string, task int) (string, error) {
	jobs, err := s.Client(t, plane).BatchV1().Jobs("default").List(ctx, metav1.ListOptions{LabelSelector: fmt.Sprintf("task-id=%d", task)})
	if err != nil {
		return "", err
	}
	succeeded, failed, running := 0, 0, 0
	for _, j := range jobs.Items {
		succeeded += int(j.Status.Succeeded)
		failed += int(j.Status.Failed)
		running += int(j.Status.Active)
	}
	switch {
	case failed > 0:
		return "failed", nil
	case len(jobs.Items) > 0 && succeeded == len(jobs.Items):
		return "completed", nil
	case running > 0:
		return "running", nil
	}
	return "pending", nil
}

// TestTaskLauncherFlow drives a plane the way seed 004's task launcher
// drives a cluster with kubectl: a volume, a two-node GPU task (one Job per
// node), logs followed until the task ends, status aggregated from the
// Jobs, a task stopped, the volume deleted.
func TestTaskLauncherFlow(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "launcher")
	createPlane(t, s, plane, "")
	// Two GPU nodes, one GPU each: a plane shaped from root before its
	// first Pod.
	if _, err := s.Dynamic(t, "root").Resource(planesGVR).Patch(t.Context(), plane, types.MergePatchType, []byte(
		`{"spec":{"simulation":{"nodes":{"count":2,"cpu":"16","memory":"64Gi","extendedResources":{"nvidia.com/gpu":1},"labels":{"accelerator":"a100"}}}}}`,
	), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	c := s.Client(t, plane)

	s.MustKubectl(t, plane, launcherVolume, "apply", "-f", "-")
	s.MustKubectl(t, plane, "", "wait", "--for=jsonpath={.status.phase}=Bound", "pvc/data-vol-vol12345",
		"--timeout="+framework.DefaultTimeout.String())

	s.MustKubectl(t, plane, launcherJob(1, 0, 2, "3s")+"---"+launcherJob(1, 1, 2, "3s"), "apply", "-f", "-")
	framework.Eventually(t, framework.DefaultTimeout, "task 1 running on both nodes", func(ctx context.Context) error {
		status, err := taskStatus(ctx, s, t, plane, 1)
		if err != nil || status != "running" {
			return fmt.Errorf("task status %q (%v)", status, err)
		}
		_, err = runningPods(ctx, c, "default", "task-id=1", 2, "python:3.11")
		return err
	})
	logs := s.MustKubectl(t, plane, "", "logs", "-f", "-l", "task-id=1", "--prefix", "--max-log-requests=2")
	for _, want := range []string{"node 0: epoch 2 loss 0.4", "node 1: epoch 2 loss 0.4"} {
		if !strings.Contains(logs, want) {
			t.Errorf("followed logs lack %q:\n%s", want, logs)
		}
	}
	framework.Eventually(t, framework.DefaultTimeout, "task 1 completed", func(ctx context.Context) error {
		status, err := taskStatus(ctx, s, t, plane, 1)
		if err != nil || status != "completed" {
			return fmt.Errorf("task status %q (%v)", status, err)
		}
		return nil
	})
	pods, err := c.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "task-id=1"})
	if err != nil {
		t.Fatal(err)
	}
	onNode := map[string]bool{}
	for _, p := range pods.Items {
		onNode[p.Spec.NodeName] = true
		node, err := c.CoreV1().Nodes().Get(t.Context(), p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gpus := node.Status.Allocatable["nvidia.com/gpu"]
		if gpus.Value() != 1 || node.Labels["accelerator"] != "a100" {
			t.Errorf("node %s: %s GPUs, labels %v", node.Name, gpus.String(), node.Labels)
		}
	}
	if len(onNode) != 2 {
		t.Errorf("the two 1-GPU pods share a node: %v", onNode)
	}

	// A third task's two nodes fit (the first task's pods are done); a
	// long one is stopped the way the launcher stops it.
	s.MustKubectl(t, plane, launcherJob(2, 0, 2, "1h")+"---"+launcherJob(2, 1, 2, "1h"), "apply", "-f", "-")
	framework.Eventually(t, framework.DefaultTimeout, "task 2 running", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "task-id=2", 2, "python:3.11")
		return err
	})
	s.MustKubectl(t, plane, "", "delete", "jobs", "-l", "task-id=2", "--cascade=background")
	framework.Eventually(t, framework.DefaultTimeout, "task 2's pods gone", func(ctx context.Context) error {
		list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "task-id=2"})
		if err != nil || len(list.Items) != 0 {
			return fmt.Errorf("%d pods left (%v)", len(list.Items), err)
		}
		return nil
	})

	claim, err := c.CoreV1().PersistentVolumeClaims("default").Get(t.Context(), "data-vol-vol12345", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.MustKubectl(t, plane, "", "delete", "pvc", "-l", "volume-id=vol12345")
	framework.Eventually(t, framework.DefaultTimeout, "the volume's PV gone with it", func(ctx context.Context) error {
		list, err := c.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, pv := range list.Items {
			if pv.Name == claim.Spec.VolumeName {
				return fmt.Errorf("volume %s still there (%s)", pv.Name, pv.Status.Phase)
			}
		}
		return nil
	})
}
