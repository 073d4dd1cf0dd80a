package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"kplane.dev/kplane/test/e2e/framework"
)

// genericResources is what `kubectl api-resources` lists in a plane of a
// server started with --profile generic: exactly the set README documents
// ("Profiles"), KEP-4080's generic control plane.
var genericResources = []string{
	"configmaps", "events", "limitranges", "namespaces", "resourcequotas", "secrets", "serviceaccounts",
	"mutatingadmissionpolicies.admissionregistration.k8s.io", "mutatingadmissionpolicybindings.admissionregistration.k8s.io",
	"mutatingwebhookconfigurations.admissionregistration.k8s.io", "validatingadmissionpolicies.admissionregistration.k8s.io",
	"validatingadmissionpolicybindings.admissionregistration.k8s.io", "validatingwebhookconfigurations.admissionregistration.k8s.io",
	"customresourcedefinitions.apiextensions.k8s.io",
	"apiservices.apiregistration.k8s.io",
	"selfsubjectreviews.authentication.k8s.io", "tokenreviews.authentication.k8s.io",
	"localsubjectaccessreviews.authorization.k8s.io", "selfsubjectaccessreviews.authorization.k8s.io",
	"selfsubjectrulesreviews.authorization.k8s.io", "subjectaccessreviews.authorization.k8s.io",
	"certificatesigningrequests.certificates.k8s.io", "clustertrustbundles.certificates.k8s.io",
	"leases.coordination.k8s.io",
	"events.events.k8s.io",
	"flowschemas.flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io",
	"clusterrolebindings.rbac.authorization.k8s.io", "clusterroles.rbac.authorization.k8s.io",
	"rolebindings.rbac.authorization.k8s.io", "roles.rbac.authorization.k8s.io",
}

// genericServer is a server of the generic profile, shared by the tests of
// this file.
func genericServer(t *testing.T) *framework.Server {
	t.Helper()
	return framework.StartServer(t, framework.Options{Args: []string{"--profile", "generic"}})
}

// TestGenericProfile: a server started with --profile generic serves the
// generic control plane in every plane, and what it serves works as in
// the full profile: CRDs, RBAC, namespace deletion, garbage collection,
// service accounts and their tokens, ValidatingAdmissionPolicy.
func TestGenericProfile(t *testing.T) {
	s := genericServer(t)
	t.Run("api-resources", func(t *testing.T) { genericAPIResources(t, s) })
	t.Run("workloads-404", func(t *testing.T) { genericWorkloadsNotFound(t, s) })
	t.Run("openapi", func(t *testing.T) { genericOpenAPI(t, s) })
	t.Run("crds", func(t *testing.T) { genericCRDs(t, s) })
	t.Run("rbac", func(t *testing.T) { genericRBAC(t, s) })
	t.Run("namespace-deletion", func(t *testing.T) { genericNamespaceDeletion(t, s) })
	t.Run("garbage-collection", func(t *testing.T) { genericGC(t, s) })
	t.Run("service-accounts", func(t *testing.T) { genericServiceAccounts(t, s) })
	t.Run("validating-admission-policy", func(t *testing.T) { genericValidatingPolicy(t, s) })
}

func genericAPIResources(t *testing.T, s *framework.Server) {
	out := s.MustKubectl(t, "gen-resources", "", "api-resources", "-o", "name")
	got := strings.Fields(out)
	want := slices.Clone(genericResources)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("api-resources of a generic plane:\n got %v\nwant %v\nextra %v, missing %v", got, want,
			difference(got, want), difference(want, got))
	}
}

// difference is what a holds and b does not.
func difference(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func genericWorkloadsNotFound(t *testing.T, s *framework.Server) {
	ctx := context.Background()
	c := s.Client(t, "gen-workloads")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("creating a Pod: want 404, got %v", err)
	}
	labels := map[string]string{"app": "d"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec}}}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("creating a Deployment: want 404, got %v", err)
	}
	for _, path := range []string{"/api/v1/nodes", "/api/v1/namespaces/default/services", "/apis/apps/v1", "/apis/batch/v1/jobs"} {
		if _, err := c.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(ctx); !apierrors.IsNotFound(err) {
			t.Errorf("GET %s: want 404, got %v", path, err)
		}
	}
	// The plane starts without default/kubernetes: there are no Services.
	if _, err := c.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
		t.Errorf("a generic plane starts with kube-root-ca.crt: %v", err)
	}
}

// genericOpenAPI: the OpenAPI documents describe only what is served.
func genericOpenAPI(t *testing.T, s *framework.Server) {
	ctx := context.Background()
	c := s.Client(t, "gen-openapi")
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/openapi/v3").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	for _, gv := range []string{"api/v1", "apis/rbac.authorization.k8s.io/v1", "apis/admissionregistration.k8s.io/v1"} {
		if _, ok := index.Paths[gv]; !ok {
			t.Errorf("/openapi/v3 lacks %s", gv)
		}
	}
	for _, gv := range []string{"apis/apps/v1", "apis/batch/v1", "apis/networking.k8s.io/v1", "apis/storage.k8s.io/v1"} {
		if _, ok := index.Paths[gv]; ok {
			t.Errorf("/openapi/v3 lists %s, which a generic plane does not serve", gv)
		}
	}
	// Every listed document builds from the definitions the server kept.
	for gv := range index.Paths {
		if _, err := c.CoreV1().RESTClient().Get().AbsPath("/openapi/v3/" + gv).DoRaw(ctx); err != nil {
			t.Errorf("/openapi/v3/%s: %v", gv, err)
		}
	}
	core, err := c.CoreV1().RESTClient().Get().AbsPath("/openapi/v3/api/v1").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/v1/namespaces/{namespace}/pods", "/api/v1/nodes", "/api/v1/namespaces/{namespace}/services"} {
		if strings.Contains(string(core), `"`+path+`"`) {
			t.Errorf("/openapi/v3/api/v1 describes %s", path)
		}
	}
	if !strings.Contains(string(core), `"/api/v1/namespaces/{namespace}/configmaps"`) {
		t.Error("/openapi/v3/api/v1 lacks configmaps")
	}
	v2, err := c.CoreV1().RESTClient().Get().AbsPath("/openapi/v2").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(v2), `"/api/v1/namespaces/{namespace}/pods"`) || strings.Contains(string(v2), `"/apis/apps/v1/`) {
		t.Error("/openapi/v2 describes pods or apps/v1")
	}
}

func genericCRDs(t *testing.T, s *framework.Server) {
	ctx := context.Background()
	plane := "gen-crds"
	createEstablished(ctx, t, s, plane, crdSpec("gizmos", "Gizmo", apiextensionsv1.NamespaceScoped, nil, "v1"))
	gizmos := s.Dynamic(t, plane).Resource(schema.GroupVersionResource{Group: "example.org", Version: "v1", Resource: "gizmos"})
	framework.Eventually(t, framework.DefaultTimeout, "a Gizmo is created", func(ctx context.Context) error {
		_, err := gizmos.Namespace("default").Create(ctx, gizmo("g1", "default", map[string]any{"size": 1}), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	got, err := gizmos.Namespace("default").Get(ctx, "g1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructuredInt(got.Object, "spec", "size"); size != 1 {
		t.Errorf("Gizmo spec.size = %d, want 1", size)
	}
	out := s.MustKubectl(t, plane, "", "api-resources", "--api-group", "example.org", "-o", "name")
	if strings.TrimSpace(out) != "gizmos.example.org" {
		t.Errorf("api-resources --api-group example.org: %q", out)
	}
}

func genericRBAC(t *testing.T, s *framework.Server) {
	ctx := context.Background()
	plane := "gen-rbac"
	admin := s.Client(t, plane)
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "cm-reader", Namespace: "default"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}}
	if _, err := admin.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-reads", Namespace: "default"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cm-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}
	if _, err := admin.RbacV1().RoleBindings("default").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	config := s.RESTConfig(plane)
	config.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
	alice := kubernetes.NewForConfigOrDie(config)
	framework.Eventually(t, framework.DefaultTimeout, "alice may list ConfigMaps in default", func(ctx context.Context) error {
		_, err := alice.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		return err
	})
	if _, err := alice.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice listing Secrets: want 403, got %v", err)
	}
	if _, err := alice.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice listing ConfigMaps of kube-system: want 403, got %v", err)
	}
}

func genericNamespaceDeletion(t *testing.T, s *framework.Server) {
	ctx := context.Background()
	c := s.Client(t, "gen-ns")
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps("doomed").Create(ctx, labelledConfigMap("cm", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Secrets("doomed").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "namespace doomed is deleted", func(ctx context.Context) error {
		_, err := c.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return errors.New("namespace still exists")
		}
		return err
	})
}

func genericGC(t *testing.T, s *framework.Server) {
	ctx := context.Background()
	c := s.Client(t, "gen-gc")
	owner, err := c.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap("owner", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dependent := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
	if _, err := c.CoreV1().Secrets("default").Create(ctx, dependent, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "the owner's dependent is collected", func(ctx context.Context) error {
		_, err := c.CoreV1().Secrets("default").Get(ctx, "dependent", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			return errors.New("dependent still exists")
		}
		return err
	})
}

func genericServiceAccounts(t *testing.T, s *framework.Server) {
	ctx := context.Background()
	c := s.Client(t, "gen-sa")
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "team gets its default ServiceAccount and kube-root-ca.crt", func(ctx context.Context) error {
		if _, err := c.CoreV1().ServiceAccounts("team").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := c.CoreV1().ConfigMaps("team").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
	token, err := c.CoreV1().ServiceAccounts("team").CreateToken(ctx, "default",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	config := s.RESTConfig("gen-sa")
	config.BearerToken = token.Status.Token
	review, err := kubernetes.NewForConfigOrDie(config).AuthenticationV1().SelfSubjectReviews().Create(ctx,
		&authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:team:default"; got != want {
		t.Errorf("the token authenticates as %q, want %q", got, want)
	}

	// A token binds to a Secret; there are no Pods to bind it to.
	secret, err := c.CoreV1().Secrets("team").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "holder"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bound := func(kind, name string, uid types.UID) error {
		_, err := c.CoreV1().ServiceAccounts("team").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
				Kind: kind, APIVersion: "v1", Name: name, UID: uid}}}, metav1.CreateOptions{})
		return err
	}
	if err := bound("Secret", secret.Name, secret.UID); err != nil {
		t.Errorf("a token bound to a Secret: %v", err)
	}
	if err := bound("Pod", "p", ""); !apierrors.IsNotFound(err) {
		t.Errorf("a token bound to a Pod: want 404, got %v", err)
	}
}

func genericValidatingPolicy(t *testing.T, s *framework.Server) {
	c := s.Client(t, "gen-vap")
	createValidatingPolicy(t, c, denyLabelPolicy("no-forbidden", "forbidden", admissionregistrationv1.Fail),
		policyBinding("no-forbidden", "no-forbidden", admissionregistrationv1.Deny))
	refused := waitRefused(t, c, "default", func(i int) *corev1.ConfigMap {
		return labelledConfigMap(fmt.Sprintf("cm-%d", i), map[string]string{"forbidden": "yes"})
	})
	if !apierrors.IsInvalid(refused) || !strings.Contains(refused.Error(), "label forbidden is not allowed") {
		t.Errorf("refusal: %v", refused)
	}
	if _, err := c.CoreV1().ConfigMaps("default").Create(context.Background(), labelledConfigMap("fine", nil), metav1.CreateOptions{}); err != nil {
		t.Errorf("a ConfigMap without the label: %v", err)
	}
	// Another plane of the server has no such policy.
	other := s.Client(t, "gen-vap-other")
	if _, err := other.CoreV1().ConfigMaps("default").Create(context.Background(),
		labelledConfigMap("cm", map[string]string{"forbidden": "yes"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("another plane's ConfigMap: %v", err)
	}
}
