package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"kplane.dev/kplane/test/e2e/framework"
)

const execPod = `
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {level: debug, app.yaml: "port: 80\n"}
---
apiVersion: v1
kind: Pod
metadata:
  name: shell
  annotations:
    exec.kplane.dev/app: '{"pg_isready -h db": {"stdout": "db:5432 - accepting connections\n"}}'
spec:
  containers:
  - name: app
    image: busybox:1.37
    env:
    - {name: MODE, value: prod}
    - name: LEVEL
      valueFrom: {configMapKeyRef: {name: settings, key: level}}
    volumeMounts: [{name: config, mountPath: /etc/app}]
  volumes:
  - name: config
    configMap: {name: settings}
`

// TestWorkloadsExec: kubectl exec in a simulated container answers from
// memory: the pod's environment, its mounted ConfigMap, scripted commands;
// anything else exits 127 with a clear message, and nothing runs on the host.
func TestWorkloadsExec(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "exec")
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, execPod, "apply", "-f", "-")
	framework.Eventually(t, framework.DefaultTimeout, "pod shell running", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "", 1, "busybox:1.37")
		return err
	})
	env := s.MustKubectl(t, plane, "", "exec", "shell", "--", "env")
	for _, want := range []string{"MODE=prod", "LEVEL=debug", "HOSTNAME=shell"} {
		if !strings.Contains(env, want) {
			t.Errorf("exec env: no %s in\n%s", want, env)
		}
	}
	if out := s.MustKubectl(t, plane, "", "exec", "shell", "-c", "app", "--", "cat", "/etc/app/app.yaml"); out != "port: 80\n" {
		t.Errorf("exec cat of the mounted ConfigMap: %q", out)
	}
	if out := s.MustKubectl(t, plane, "", "exec", "shell", "--", "pg_isready", "-h", "db"); !strings.Contains(out, "accepting connections") {
		t.Errorf("scripted command: %q", out)
	}
	out, err := s.Kubectl(t, plane, "", "exec", "shell", "--", "rm", "-rf", "/")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 127 || !strings.Contains(out, "rm: command not found") {
		t.Fatalf("unknown command: want exit 127 and a clear message, got %v: %s", err, out)
	}
	// The same pod name in another plane is that plane's, not this one's.
	other := uniquePlane(t, "exec-other")
	if out, err := s.Kubectl(t, other, "", "exec", "shell", "--", "env"); err == nil || !strings.Contains(out, "NotFound") && !strings.Contains(out, "not found") {
		t.Fatalf("exec in another plane: want not found, got %v: %s", err, out)
	}
}
