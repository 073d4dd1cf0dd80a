package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/test/e2e/framework"
)

// kplaneCmd runs the kplane CLI against s.
func kplaneCmd(t *testing.T, s *framework.Server, args ...string) (string, error) {
	t.Helper()
	bin, _ := framework.Binary()
	// `kplane planes <verb> --data-dir <dir> <id>`
	full := append([]string{args[0], args[1], "--data-dir", s.DataDir}, args[2:]...)
	out, err := exec.Command(bin, full...).CombinedOutput()
	return string(out), err
}

// planeToken mints a plane-bound token with `kplane kubeconfig`.
func planeToken(t *testing.T, s *framework.Server, plane string, extra ...string) string {
	t.Helper()
	bin, _ := framework.Binary()
	args := append(append([]string{"kubeconfig", "--data-dir", s.DataDir}, extra...), plane)
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("kplane kubeconfig %s: %v", plane, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "token: ") {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "token: "))
		}
	}
	t.Fatalf("no token in kubeconfig:\n%s", out)
	return ""
}

func clientWithToken(t *testing.T, s *framework.Server, plane, token string) *kubernetes.Clientset {
	t.Helper()
	cfg := s.RESTConfig(plane)
	cfg.BearerToken = token
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func statusCode(err error) int32 {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Code
	}
	return 0
}

// TestPlaneCredentialsAndRBAC is the hostile suite: credentials, tokens and
// impersonation never reach beyond their plane, and RBAC is per plane.
func TestPlaneCredentialsAndRBAC(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	a, b := uniquePlane(t, "sec-a"), uniquePlane(t, "sec-b")
	tokenA := planeToken(t, s, a, "--ttl", "10m")
	s.Client(t, b) // b exists too

	// The plane-bound credential: cluster-admin in a, nothing anywhere else.
	if _, err := clientWithToken(t, s, a, tokenA).CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("plane token in its plane: %v", err)
	}
	for _, other := range []string{b, "root", uniquePlane(t, "sec-new")} {
		_, err := clientWithToken(t, s, other, tokenA).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("token of %s used on %s: want 401, got %v", a, other, err)
		}
	}
	// --ttl sets the lifetime.
	payload, _ := base64.RawURLEncoding.DecodeString(strings.Split(tokenA, ".")[1])
	var claims struct{ Exp, Iat int64 }
	_ = json.Unmarshal(payload, &claims)
	if lifetime := time.Duration(claims.Exp-claims.Iat) * time.Second; lifetime != 10*time.Minute {
		t.Errorf("token lifetime %s, want 10m", lifetime)
	}

	// A service-account token of a, replayed on b where a same-named
	// service account exists.
	for _, plane := range []string{a, b} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bot"}}
		if _, err := s.Client(t, plane).CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := s.Client(t, a).CoreV1().ServiceAccounts("default").CreateToken(ctx, "bot", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	review, err := clientWithToken(t, s, a, tr.Status.Token).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil || review.Status.UserInfo.Username != "system:serviceaccount:default:bot" {
		t.Fatalf("SA token in its plane: %v %v", err, review)
	}
	if _, err := clientWithToken(t, s, b, tr.Status.Token).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("SA token of %s replayed on %s: want 401, got %v", a, b, err)
	}

	// Impersonation of privileged identities from a plane's cluster-admin.
	for _, imp := range []rest.ImpersonationConfig{
		{UserName: "system:apiserver"},
		{UserName: "someone", Groups: []string{"system:masters"}},
		{UserName: "kplane-admin"},
	} {
		cfg := s.RESTConfig(a)
		cfg.BearerToken = tokenA
		cfg.Impersonate = imp
		c, _ := kubernetes.NewForConfig(cfg)
		if _, err := c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("impersonating %+v from a plane cluster-admin: want 403, got %v", imp, err)
		}
	}

	// RBAC per plane: a view binding in a.
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "jane-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "jane"}},
	}
	if _, err := s.Client(t, a).RbacV1().RoleBindings("default").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	jane := func(plane string) *kubernetes.Clientset {
		cfg := s.RESTConfig(plane)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "jane", Groups: []string{"system:authenticated"}}
		c, _ := kubernetes.NewForConfig(cfg)
		return c
	}
	// Authorization reads bindings from the watch cache: a binding takes
	// effect once the cache has it, a moment after it is written.
	eventually(t, framework.DefaultTimeout, "view in "+a+": list pods", func() (bool, error) {
		_, err := jane(a).CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := jane(a).CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("view in %s: create pod: want 403, got %v", a, err)
	}
	if _, err := jane(b).CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("view binding of %s used in %s: want 403, got %v", a, b, err)
	}

	// A user who may not create planes cannot bring one into being.
	unknown := uniquePlane(t, "sec-unknown")
	if _, err := jane(unknown).CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		t.Errorf("unprivileged first request to unknown plane: want 403 or 404, got %v", err)
	}
	if keys := s.DatastoreKeys(t, "/registry/"); containsPlane(keys, unknown) {
		t.Errorf("plane %s was written by an unprivileged request", unknown)
	}

	// A resourceVersion of a used in b reveals nothing of a.
	cm, err := s.Client(t, a).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "secret-data"}, Data: map[string]string{"k": "a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client(t, b).CoreV1().ConfigMaps("default").Get(ctx, "secret-data", metav1.GetOptions{ResourceVersion: cm.ResourceVersion}); !apierrors.IsNotFound(err) {
		t.Errorf("get in %s with a resourceVersion of %s: want NotFound, got %v", b, a, err)
	}

	// Per-plane readiness.
	req, _ := http.NewRequest("GET", s.PlaneURL(a)+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+tokenA)
	if resp, err := s.HTTPClient().Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("readyz of %s: %v %v", a, err, resp)
	}
	req, _ = http.NewRequest("GET", s.PlaneURL(uniquePlane(t, "sec-nope"))+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+s.AdminToken())
	if resp, err := s.HTTPClient().Do(req); err != nil || resp.StatusCode != 404 {
		t.Errorf("readyz of an unknown plane: want 404, got %v %v", err, resp)
	}
}

// TestPlaneDeletion: deleting a Plane removes every object of the plane
// from the datastore (built-in and custom resources), ends its watches, and
// the id can be used again for an empty plane.
func TestPlaneDeletion(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	plane := "doomed"
	if out, err := kplaneCmd(t, s, "planes", "create", plane); err != nil {
		t.Fatalf("kplane planes create: %v\n%s", err, out)
	}
	c := s.Client(t, plane)
	crdYAML, _ := os.ReadFile("testdata/rayservices-crd.yaml")
	s.MustKubectl(t, plane, string(crdYAML), "apply", "-f", "-")
	waitEstablished(t, s, plane, "rayservices.ray.example.com")

	w, err := c.CoreV1().ConfigMaps(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created := 0
	for ns := 0; ns < 5; ns++ {
		name := fmt.Sprintf("ns-%d", ns)
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		created++
		for i := 0; i < 10; i++ {
			n := fmt.Sprintf("o-%d", i)
			om := metav1.ObjectMeta{Name: n, Namespace: name, Finalizers: []string{"example.com/keep"}}
			must := func(_ any, err error) {
				if err != nil {
					t.Fatal(err)
				}
				created++
			}
			must(c.CoreV1().ConfigMaps(name).Create(ctx, &corev1.ConfigMap{ObjectMeta: om}, metav1.CreateOptions{}))
			must(c.CoreV1().Secrets(name).Create(ctx, &corev1.Secret{ObjectMeta: om}, metav1.CreateOptions{}))
			must(c.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: om}, metav1.CreateOptions{}))
			must(c.CoreV1().Services(name).Create(ctx, &corev1.Service{ObjectMeta: om, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}, metav1.CreateOptions{}))
			must(c.CoreV1().Pods(name).Create(ctx, &corev1.Pod{ObjectMeta: om, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, metav1.CreateOptions{}))
			must(c.RbacV1().Roles(name).Create(ctx, &rbacv1.Role{ObjectMeta: om}, metav1.CreateOptions{}))
			must(c.AppsV1().Deployments(name).Create(ctx, &appsv1.Deployment{ObjectMeta: om, Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": n}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": n}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}, metav1.CreateOptions{}))
			must(c.BatchV1().Jobs(name).Create(ctx, &batchv1.Job{ObjectMeta: om, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}, metav1.CreateOptions{}))
			must(c.CoordinationV1().Leases(name).Create(ctx, &coordinationv1.Lease{ObjectMeta: om}, metav1.CreateOptions{}))
			must(s.Dynamic(t, plane).Resource(rayGVR).Namespace(name).Create(ctx, rayServiceIn(n, name), metav1.CreateOptions{}))
		}
	}
	if created < 500 {
		t.Fatalf("created %d objects", created)
	}
	if n := len(planeKeys(t, s, plane)); n < created {
		t.Fatalf("datastore holds %d keys of %s, want at least %d", n, plane, created)
	}

	began := time.Now()
	if out, err := kplaneCmd(t, s, "planes", "delete", plane); err != nil {
		t.Fatalf("kplane planes delete: %v\n%s", err, out)
	}
	t.Logf("deleted a plane of %d objects in %s", created, time.Since(began))
	if keys := planeKeys(t, s, plane); len(keys) != 0 {
		t.Fatalf("%d keys of the deleted plane remain, e.g. %v", len(keys), keys[:min(5, len(keys))])
	}
	// The open watch ended cleanly.
	deadline := time.After(framework.DefaultTimeout)
	for done := false; !done; {
		select {
		case _, ok := <-w.ResultChan():
			done = !ok
		case <-deadline:
			t.Fatal("the watch of the deleted plane is still open")
		}
	}

	// The same id again: an empty, freshly bootstrapped plane.
	if out, err := kplaneCmd(t, s, "planes", "create", plane); err != nil {
		t.Fatalf("recreating: %v\n%s", err, out)
	}
	nss, err := s.Client(t, plane).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil || len(nss.Items) != 4 {
		t.Fatalf("recreated plane has namespaces %v (%v)", len(nss.Items), err)
	}
	if _, err := s.Dynamic(t, plane).Resource(rayGVR).Namespace("ns-0").List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the CRD of the deleted plane survived: %v", err)
	}
	out := s.MustKubectl(t, "root", "", "get", "planes")
	if !strings.Contains(out, "PHASE") || !strings.Contains(out, "OBJECTS") || !strings.Contains(out, plane) {
		t.Errorf("kubectl get planes:\n%s", out)
	}
}

// TestMaxPlanes: the server refuses planes beyond --max-planes, clearly.
func TestMaxPlanes(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{Args: []string{"--max-planes", "2"}})
	for _, p := range []string{"one", "two"} {
		if out, err := kplaneCmd(t, s, "planes", "create", p); err != nil {
			t.Fatalf("%s: %v\n%s", p, err, out)
		}
	}
	out, err := kplaneCmd(t, s, "planes", "create", "three")
	if err == nil || !strings.Contains(out, "plane limit reached") {
		t.Fatalf("third plane: want a plane limit error, got %v\n%s", err, out)
	}
	_, err = s.Client(t, "four").CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "plane limit reached") {
		t.Fatalf("first request to a fifth plane: want 403 plane limit, got %v", err)
	}
	if containsPlane(s.DatastoreKeys(t, "/registry/"), "four") {
		t.Fatal("a refused plane was written")
	}
}

func planeKeys(t *testing.T, s *framework.Server, plane string) []string {
	var out []string
	for _, k := range s.DatastoreKeys(t, "/registry/") {
		if strings.Contains(k, "/"+plane+"/") {
			out = append(out, k)
		}
	}
	return out
}

func rayServiceIn(name, namespace string) *unstructured.Unstructured {
	u := rayService(name, "https://example.com/dag")
	u.SetNamespace(namespace)
	u.SetFinalizers([]string{"example.com/keep"})
	return u
}

// TestPlanesStoredReadyAtCreate: a plane with nothing left to give it (on
// the base plane the server has bootstrapped, or from a Ready template)
// is stored Ready by its create, in one write: the create answers Ready,
// and the Plane stays at the revision the create wrote.
func TestPlanesStoredReadyAtCreate(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	planesAPI := s.Dynamic(t, "root").Resource(planesGVR)
	// Makes sure the base is bootstrapped, and gives the member its template.
	tmpl := uniquePlane(t, "ready-tmpl")
	createPlane(t, s, tmpl, "")
	framework.Eventually(t, framework.DefaultTimeout, "template "+tmpl+" Ready", func(ctx context.Context) error {
		p, err := planesAPI.Get(ctx, tmpl, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if phase, _, _ := unstructured.NestedString(p.Object, "status", "phase"); phase != "Ready" {
			return fmt.Errorf("phase %q", phase)
		}
		return nil
	})
	for _, c := range []struct{ what, name, template string }{
		{"a plane made from nothing", uniquePlane(t, "ready-plain"), ""},
		{"a member of a Ready template", uniquePlane(t, "ready-member"), tmpl},
	} {
		spec := map[string]any{}
		if c.template != "" {
			spec["template"] = c.template
		}
		created, err := planesAPI.Create(ctx, newPlane(c.name, spec), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if phase, _, _ := unstructured.NestedString(created.Object, "status", "phase"); phase != "Ready" {
			t.Fatalf("%s: the create answers phase %q, want Ready", c.what, phase)
		}
		if _, err := s.Client(t, c.name).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: the plane does not serve: %v", c.what, err)
		}
		framework.Consistently(t, time.Second, c.what+": no status write after the create", func(ctx context.Context) error {
			p, err := planesAPI.Get(ctx, c.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.GetResourceVersion() != created.GetResourceVersion() {
				return fmt.Errorf("the Plane went from revision %s to %s: %v", created.GetResourceVersion(), p.GetResourceVersion(), p.Object["status"])
			}
			return nil
		})
	}
}

// TestPlaneDeletedAndMadeAgainAtOnce: a plane deleted and created again
// the moment its Plane is gone (an episode loop's delete + create) answers
// its probes each time: the deletion's cleanup never forgets the new
// plane, which, stored Ready, gets no later write that would bring it
// back.
func TestPlaneDeletedAndMadeAgainAtOnce(t *testing.T) {
	t.Parallel()
	s := shared
	planesAPI := s.Dynamic(t, "root").Resource(planesGVR)
	name := uniquePlane(t, "again")
	createPlane(t, s, name, "")
	c := s.Client(t, name)
	for round := 1; round <= 30; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), framework.DefaultTimeout)
		if err := planesAPI.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			cancel()
			t.Fatalf("round %d: deleting: %v", round, err)
		}
		framework.Eventually(t, framework.DefaultTimeout, "the Plane gone", func(ctx context.Context) error {
			if _, err := planesAPI.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there: %v", err)
			}
			return nil
		})
		plane := newPlane(name, nil)
		// 409 while the name is still being released; tried again at once,
		// as an episode loop does, so that the create lands while the
		// deletion's cleanup is still under way.
		for {
			_, err := planesAPI.Create(ctx, plane, metav1.CreateOptions{})
			if err == nil {
				break
			}
			if !apierrors.IsConflict(err) || ctx.Err() != nil {
				cancel()
				t.Fatalf("round %d: creating again: %v", round, err)
			}
		}
		framework.Eventually(t, 10*time.Second, fmt.Sprintf("round %d: the plane made again answers /readyz", round), func(ctx context.Context) error {
			_, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		})
		cancel()
	}
}

// TestPlaneIDUsedOnceItsPlaneIsGone: a client that has read a deleted
// plane's Plane gone and uses the id at once meets a new, empty plane
// (made by its first request), never the old plane's deletion (409).
func TestPlaneIDUsedOnceItsPlaneIsGone(t *testing.T) {
	t.Parallel()
	s := shared
	planesAPI := s.Dynamic(t, "root").Resource(planesGVR)
	name := uniquePlane(t, "reuse")
	c := s.Client(t, name)
	for round := 1; round <= 20; round++ {
		marker := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "round", Namespace: "default"}}
		framework.Eventually(t, framework.DefaultTimeout, fmt.Sprintf("round %d: a ConfigMap written to the plane", round), func(ctx context.Context) error {
			_, err := c.CoreV1().ConfigMaps("default").Create(ctx, marker, metav1.CreateOptions{})
			return err
		})
		if err := planesAPI.Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("round %d: deleting: %v", round, err)
		}
		framework.Eventually(t, framework.DefaultTimeout, "the Plane gone", func(ctx context.Context) error {
			if _, err := planesAPI.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("still there: %v", err)
			}
			return nil
		})
		list, err := c.CoreV1().ConfigMaps("default").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("round %d: the id used once its Plane was gone: %v", round, err)
		}
		for _, cm := range list.Items {
			if cm.Name == marker.Name {
				t.Fatalf("round %d: the plane made again holds the deleted plane's ConfigMap", round)
			}
		}
	}
}
