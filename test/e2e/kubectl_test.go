package e2e

import (
	"strings"
	"testing"
)

const workloadManifests = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 80
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 80
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: default
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: train
        image: python:3.13-slim
        command: ["python", "-c", "print('hi')"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: reader
  namespace: default
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list"]
`

// TestKubectl drives a plane with kubectl the way a user does: explain,
// client-side apply, server-side apply, get.
func TestKubectl(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "kubectl")

	out := shared.MustKubectl(t, plane, "", "explain", "deployment.spec.replicas")
	if !strings.Contains(out, "replicas") || !strings.Contains(out, "integer") {
		t.Fatalf("kubectl explain: %s", out)
	}
	out = shared.MustKubectl(t, plane, workloadManifests, "apply", "-f", "-")
	for _, want := range []string{"deployment.apps/web created", "service/web created", "job.batch/train created", "role.rbac.authorization.k8s.io/reader created"} {
		if !strings.Contains(out, want) {
			t.Fatalf("client-side apply: missing %q in:\n%s", want, out)
		}
	}
	// Applying again is a no-op; a change is a configured.
	out = shared.MustKubectl(t, plane, workloadManifests, "apply", "-f", "-")
	if !strings.Contains(out, "deployment.apps/web unchanged") {
		t.Fatalf("second apply: %s", out)
	}
	out = shared.MustKubectl(t, plane, strings.Replace(workloadManifests, "replicas: 2", "replicas: 3", 1), "apply", "-f", "-")
	if !strings.Contains(out, "deployment.apps/web configured") {
		t.Fatalf("apply of a change: %s", out)
	}

	// Server-side apply, in a second plane, of the same manifests.
	other := uniquePlane(t, "kubectl-ssa")
	out = shared.MustKubectl(t, other, workloadManifests, "apply", "--server-side", "-f", "-")
	if !strings.Contains(out, "deployment.apps/web serverside-applied") {
		t.Fatalf("server-side apply: %s", out)
	}
	out = shared.MustKubectl(t, other, "", "get", "deployment", "web", "-o", "jsonpath={.spec.replicas} {.metadata.managedFields[0].manager}")
	if out != "2 kubectl" {
		t.Fatalf("server-side applied deployment: %q", out)
	}
	out = shared.MustKubectl(t, plane, "", "get", "deployment", "web", "-o", "jsonpath={.spec.replicas}")
	if out != "3" {
		t.Fatalf("deployment in %s: %q (the other plane's apply must not touch it)", plane, out)
	}
	out = shared.MustKubectl(t, other, "", "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}")
	if !strings.HasPrefix(out, "10.96.") {
		t.Fatalf("service cluster IP: %q", out)
	}
	out = shared.MustKubectl(t, other, "", "api-resources", "-o", "name")
	for _, want := range []string{"pods", "deployments.apps", "jobs.batch", "roles.rbac.authorization.k8s.io", "leases.coordination.k8s.io", "poddisruptionbudgets.policy", "networkpolicies.networking.k8s.io", "storageclasses.storage.k8s.io", "horizontalpodautoscalers.autoscaling", "endpointslices.discovery.k8s.io", "priorityclasses.scheduling.k8s.io", "validatingwebhookconfigurations.admissionregistration.k8s.io", "certificatesigningrequests.certificates.k8s.io"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("api-resources lacks %s", want)
		}
	}
}
