package e2e

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kplane.dev/kplane/test/e2e/framework"
)

const statefulDB = `
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 5432}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: postgres, image: postgres:17}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
`

// TestWorkloadsStatefulSet: a StatefulSet with volumeClaimTemplates gets
// its ordered Pods, each claim is Bound to a volume of its own, and a
// deleted claim's volume goes with it.
func TestWorkloadsStatefulSet(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "stateful")
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, statefulDB, "apply", "-f", "-")
	timeout := "--timeout=" + (2 * framework.DefaultTimeout).String()
	if out, err := s.Kubectl(t, plane, "", "rollout", "status", "statefulset/db", timeout); err != nil {
		t.Fatalf("kubectl rollout status statefulset/db: %v\n%s", err, out)
	}
	pods, err := runningPods(t.Context(), c, "default", "app=db", 3, "postgres:17")
	if err != nil {
		t.Fatal(err)
	}
	// Ordered: db-0 was ready before db-1 was made, db-1 before db-2.
	created := map[string]metav1.Time{}
	for _, p := range pods {
		created[p.Name] = p.CreationTimestamp
	}
	for i := 1; i < 3; i++ {
		prev, cur := fmt.Sprintf("db-%d", i-1), fmt.Sprintf("db-%d", i)
		if _, ok := created[cur]; !ok {
			t.Fatalf("no pod %s among %v", cur, created)
		}
		if created[cur].Time.Before(created[prev].Time) {
			t.Errorf("%s made at %s, before %s at %s", cur, created[cur], prev, created[prev])
		}
	}
	volumes := map[string]string{}
	framework.Eventually(t, framework.DefaultTimeout, "3 claims Bound to volumes of their own", func(ctx context.Context) error {
		for i := 0; i < 3; i++ {
			name := fmt.Sprintf("data-db-%d", i)
			claim, err := c.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if claim.Status.Phase != corev1.ClaimBound || claim.Spec.VolumeName == "" {
				return fmt.Errorf("claim %s: phase %s volume %q", name, claim.Status.Phase, claim.Spec.VolumeName)
			}
			volume, err := c.CoreV1().PersistentVolumes().Get(ctx, claim.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if volume.Status.Phase != corev1.VolumeBound || volume.Spec.ClaimRef == nil || volume.Spec.ClaimRef.UID != claim.UID {
				return fmt.Errorf("volume %s: phase %s claimRef %+v", volume.Name, volume.Status.Phase, volume.Spec.ClaimRef)
			}
			if got := claim.Status.Capacity[corev1.ResourceStorage]; got.String() != "1Gi" {
				return fmt.Errorf("claim %s capacity %s, want 1Gi", name, got.String())
			}
			volumes[name] = volume.Name
		}
		return nil
	})

	// The volumes are the plane's own: another plane sees none of them.
	other := s.Client(t, uniquePlane(t, "stateful-other"))
	if list, err := other.CoreV1().PersistentVolumes().List(t.Context(), metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("another plane lists volumes %v (err %v)", list, err)
	}

	s.MustKubectl(t, plane, "", "scale", "statefulset/db", "--replicas=1")
	framework.Eventually(t, framework.DefaultTimeout, "db scaled down to db-0", func(ctx context.Context) error {
		_, err := runningPods(ctx, c, "default", "app=db", 1, "postgres:17")
		return err
	})
	if err := c.CoreV1().PersistentVolumeClaims("default").Delete(t.Context(), "data-db-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "the deleted claim's volume deleted", func(ctx context.Context) error {
		_, err := c.CoreV1().PersistentVolumes().Get(ctx, volumes["data-db-2"], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("volume %s still there (err %v)", volumes["data-db-2"], err)
	})
}

const replicationWeb = `
apiVersion: v1
kind: ReplicationController
metadata: {name: web}
spec:
  replicas: 2
  selector: {app: rcweb}
  template:
    metadata: {labels: {app: rcweb}}
    spec:
      containers: [{name: nginx, image: nginx:1.27, ports: [{containerPort: 80}]}]
---
apiVersion: v1
kind: Service
metadata: {name: rcweb}
spec:
  selector: {app: rcweb}
  ports: [{port: 80}]
`

// TestWorkloadsReplicationController: a ReplicationController keeps its
// Pods running and its Service's Endpoints list their IPs; Endpoints
// written by hand for a Service without a selector are left alone.
func TestWorkloadsReplicationController(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "rc")
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, replicationWeb, "apply", "-f", "-")
	manual := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "external"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}
	if _, err := c.CoreV1().Services("default").Create(t.Context(), manual, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	manualEndpoints := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "external"},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.9.8.7"}},
			Ports: []corev1.EndpointPort{{Port: 443}}}}}
	if _, err := c.CoreV1().Endpoints("default").Create(t.Context(), manualEndpoints, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	framework.Eventually(t, framework.DefaultTimeout, "2 pods of the ReplicationController running", func(ctx context.Context) error {
		var err error
		pods, err = runningPods(ctx, c, "default", "app=rcweb", 2, "nginx:1.27")
		return err
	})
	framework.Eventually(t, framework.DefaultTimeout, "rc status and Endpoints of rcweb", func(ctx context.Context) error {
		rc, err := c.CoreV1().ReplicationControllers("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rc.Status.ReadyReplicas != 2 {
			return fmt.Errorf("rc status %+v", rc.Status)
		}
		ep, err := c.CoreV1().Endpoints("default").Get(ctx, "rcweb", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ips := map[string]bool{}
		for _, subset := range ep.Subsets {
			for _, a := range subset.Addresses {
				ips[a.IP] = true
			}
		}
		for _, p := range pods {
			if !ips[p.Status.PodIP] {
				return fmt.Errorf("endpoints %v lack pod %s IP %s", ips, p.Name, p.Status.PodIP)
			}
		}
		if len(ips) != 2 {
			return fmt.Errorf("endpoints list %v, want the 2 pod IPs", ips)
		}
		return nil
	})
	// Delete a pod: the controller replaces it.
	if err := c.CoreV1().Pods("default").Delete(t.Context(), pods[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "a replacement pod running", func(ctx context.Context) error {
		now, err := runningPods(ctx, c, "default", "app=rcweb", 2, "nginx:1.27")
		if err != nil {
			return err
		}
		for _, p := range now {
			if p.Name == pods[0].Name {
				return fmt.Errorf("pod %s still there", p.Name)
			}
		}
		return nil
	})
	ep, err := c.CoreV1().Endpoints("default").Get(t.Context(), "external", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("hand-written Endpoints of a selector-less Service: %v", err)
	}
	if len(ep.Subsets) != 1 || ep.Subsets[0].Addresses[0].IP != "10.9.8.7" {
		t.Fatalf("hand-written Endpoints changed: %+v", ep.Subsets)
	}
}

const budgetedWeb = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: budgeted}}
  template:
    metadata: {labels: {app: budgeted}}
    spec:
      containers: [{name: nginx, image: nginx:1.27}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: budgeted}}
`

// TestWorkloadsDisruptionBudget: a PodDisruptionBudget's status follows
// its Pods, and the eviction API honours it.
func TestWorkloadsDisruptionBudget(t *testing.T) {
	t.Parallel()
	s := shared
	plane := uniquePlane(t, "pdb")
	c := s.Client(t, plane)
	s.MustKubectl(t, plane, budgetedWeb, "apply", "-f", "-")
	rollout(t, s, plane, "web")
	framework.Eventually(t, framework.DefaultTimeout, "budget: 3 healthy, 1 disruption allowed", func(ctx context.Context) error {
		pdb, err := c.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := pdb.Status; st.ExpectedPods != 3 || st.CurrentHealthy != 3 || st.DesiredHealthy != 2 || st.DisruptionsAllowed != 1 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	s.MustKubectl(t, plane, "", "scale", "deployment/web", "--replicas=2")
	framework.Eventually(t, framework.DefaultTimeout, "budget: 2 healthy, no disruption allowed", func(ctx context.Context) error {
		pdb, err := c.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := pdb.Status; st.CurrentHealthy != 2 || st.DisruptionsAllowed != 0 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	var pods []corev1.Pod
	framework.Eventually(t, framework.DefaultTimeout, "2 pods of web", func(ctx context.Context) error {
		var err error
		pods, err = runningPods(ctx, c, "default", "app=budgeted", 2, "nginx:1.27")
		return err
	})
	err := c.CoreV1().Pods("default").EvictV1(t.Context(), &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pods[0].Name, Namespace: "default"}})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("evicting below the budget: want 429, got %v", err)
	}
	s.MustKubectl(t, plane, "", "scale", "deployment/web", "--replicas=3")
	framework.Eventually(t, framework.DefaultTimeout, "an eviction within the budget succeeds", func(ctx context.Context) error {
		return c.CoreV1().Pods("default").EvictV1(ctx, &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: pods[0].Name, Namespace: "default"}})
	})
}
