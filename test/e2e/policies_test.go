package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/test/e2e/framework"
)

// configMapRules match creates and updates of ConfigMaps.
var configMapRules = &admissionregistrationv1.MatchResources{
	ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}},
}

// denyLabelPolicy refuses ConfigMaps that carry label.
func denyLabelPolicy(name, label string, failure admissionregistrationv1.FailurePolicyType) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    &failure,
			MatchConstraints: configMapRules.DeepCopy(),
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!has(object.metadata.labels) || !(%q in object.metadata.labels)", label),
				Message:    fmt.Sprintf("label %s is not allowed", label),
			}},
		},
	}
}

func policyBinding(name, policy string, actions ...admissionregistrationv1.ValidationAction) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy, ValidationActions: actions},
	}
}

func createValidatingPolicy(t *testing.T, c kubernetes.Interface, policy *admissionregistrationv1.ValidatingAdmissionPolicy, binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitRefused waits until creating cm in ns is refused and returns the
// error: a policy acts once the watch cache holds it.
func waitRefused(t *testing.T, c kubernetes.Interface, ns string, cm func(i int) *corev1.ConfigMap) error {
	t.Helper()
	var refused error
	i := 0
	framework.Eventually(t, framework.DefaultTimeout, "the policy refuses a ConfigMap", func(ctx context.Context) error {
		i++
		_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm(i), metav1.CreateOptions{})
		if err == nil {
			return fmt.Errorf("ConfigMap %d admitted", i)
		}
		refused = err
		return nil
	})
	return refused
}

// TestValidatingAdmissionPolicyPerPlane: a policy and its binding refuse
// what they match with upstream's 422 naming them, in their own plane only;
// the same names in another plane act there with that plane's definition;
// a binding's namespaceSelector reads the plane's own namespaces; deleting
// the plane takes its policies with it.
func TestValidatingAdmissionPolicyPerPlane(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	a, b, free := uniquePlane(t, "vap-a"), uniquePlane(t, "vap-b"), uniquePlane(t, "vap-free")
	ca, cb, cfree := s.Client(t, a), s.Client(t, b), s.Client(t, free)

	// The same names in a and b; a's refuses label "red", b's label "blue".
	createValidatingPolicy(t, ca, denyLabelPolicy("no-color", "red", admissionregistrationv1.Fail),
		policyBinding("no-color", "no-color", admissionregistrationv1.Deny))
	createValidatingPolicy(t, cb, denyLabelPolicy("no-color", "blue", admissionregistrationv1.Fail),
		policyBinding("no-color", "no-color", admissionregistrationv1.Deny))

	err := waitRefused(t, ca, "default", func(i int) *corev1.ConfigMap {
		return labelledConfigMap(fmt.Sprintf("red-%d", i), map[string]string{"red": "1"})
	})
	want := "ValidatingAdmissionPolicy 'no-color' with binding 'no-color' denied request: label red is not allowed"
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("plane %s, red ConfigMap: got %v, want 422 with %q", a, err, want)
	}
	waitRefused(t, cb, "default", func(i int) *corev1.ConfigMap {
		return labelledConfigMap(fmt.Sprintf("blue-%d", i), map[string]string{"blue": "1"})
	})
	// Each plane's policy acts in its own plane only.
	for _, tc := range []struct {
		c     kubernetes.Interface
		plane string
		label string
	}{{ca, a, "blue"}, {cb, b, "red"}, {cfree, free, "red"}, {cfree, free, "blue"}} {
		if _, err := tc.c.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap("ok-"+tc.label, map[string]string{tc.label: "1"}),
			metav1.CreateOptions{}); err != nil {
			t.Errorf("plane %s, ConfigMap labelled %s: %v", tc.plane, tc.label, err)
		}
	}

	// A binding's namespaceSelector matches the namespaces of its plane:
	// "work" is labelled env=prod in a only.
	for _, c := range []kubernetes.Interface{ca, cb} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "work"}}
		if c == ca {
			ns.Labels = map[string]string{"env": "prod"}
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := policyBinding("prod-only", "no-green", admissionregistrationv1.Deny)
		binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}
		createValidatingPolicy(t, c, denyLabelPolicy("no-green", "green", admissionregistrationv1.Fail), binding)
	}
	waitRefused(t, ca, "work", func(i int) *corev1.ConfigMap {
		return labelledConfigMap(fmt.Sprintf("green-%d", i), map[string]string{"green": "1"})
	})
	if _, err := ca.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap("green", map[string]string{"green": "1"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("plane %s, green ConfigMap outside env=prod: %v", a, err)
	}
	if _, err := cb.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("green", map[string]string{"green": "1"}), metav1.CreateOptions{}); err != nil {
		t.Errorf("plane %s, green ConfigMap in its unlabelled work namespace: %v", b, err)
	}

	// Deleting plane a removes its policies: a new plane of the same name
	// admits what a's policy refused.
	if out, err := kplaneCmd(t, s, "planes", "delete", a); err != nil {
		t.Fatalf("kplane planes delete: %v\n%s", err, out)
	}
	again := s.Client(t, a)
	framework.Eventually(t, framework.DefaultTimeout, "plane "+a+" made again admits a red ConfigMap", func(ctx context.Context) error {
		_, err := again.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap("red", map[string]string{"red": "1"}), metav1.CreateOptions{})
		return err
	})
	waitRefused(t, cb, "default", func(i int) *corev1.ConfigMap {
		return labelledConfigMap(fmt.Sprintf("blue-after-%d", i), map[string]string{"blue": "1"})
	})
}

// warnings collects the warnings a client is sent.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

// TestValidatingAdmissionPolicyActionsAndFailures: Warn admits with
// upstream's warning, Audit admits silently, a CEL error is refused with
// its field path, a runtime error follows the failure policy.
func TestValidatingAdmissionPolicyActionsAndFailures(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	plane := uniquePlane(t, "vap-actions")
	seen := &warnings{}
	config := rest.CopyConfig(s.RESTConfig(plane))
	config.WarningHandler = seen
	c, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}

	createValidatingPolicy(t, c, denyLabelPolicy("warn-red", "red", admissionregistrationv1.Fail),
		policyBinding("warn-red", "warn-red", admissionregistrationv1.Warn))
	createValidatingPolicy(t, c, denyLabelPolicy("audit-blue", "blue", admissionregistrationv1.Fail),
		policyBinding("audit-blue", "audit-blue", admissionregistrationv1.Audit))
	wantWarning := "Validation failed for ValidatingAdmissionPolicy 'warn-red' with binding 'warn-red': label red is not allowed"
	i := 0
	framework.Eventually(t, framework.DefaultTimeout, "the Warn policy warns", func(ctx context.Context) error {
		i++
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap(fmt.Sprintf("red-%d", i), map[string]string{"red": "1"}),
			metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("warned ConfigMap refused: %w", err)
		}
		if got := seen.take(); len(got) != 1 || got[0] != wantWarning {
			return fmt.Errorf("warnings %q, want [%q]", got, wantWarning)
		}
		return nil
	})
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap("blue", map[string]string{"blue": "1"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("Audit policy refused: %v", err)
	}
	if got := seen.take(); len(got) != 0 {
		t.Fatalf("Audit policy warned: %q", got)
	}

	// A CEL syntax error: 422 on the expression's field path.
	broken := denyLabelPolicy("broken", "x", admissionregistrationv1.Fail)
	broken.Spec.Validations[0].Expression = "object.metadata.name >>> 1"
	_, err = c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, broken, metav1.CreateOptions{})
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.validations[0].expression") || !asStatus(err, &status) ||
		len(status.Status().Details.Causes) == 0 || status.Status().Details.Causes[0].Field != "spec.validations[0].expression" {
		t.Fatalf("policy with a CEL syntax error: got %v, want 422 on spec.validations[0].expression", err)
	}

	// An expression over CEL's runtime cost limit fails, and its failure
	// policy (Fail) refuses.
	costly := denyLabelPolicy("costly", "x", admissionregistrationv1.Fail)
	costly.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "only-costly",
		Expression: `has(object.metadata.labels) && "costly" in object.metadata.labels`}}
	costly.Spec.Validations[0].Expression = "object.data.all(a, object.data.all(b, object.data.all(c, object.data.all(d, a+b+c+d != ''))))"
	createValidatingPolicy(t, c, costly, policyBinding("costly", "costly", admissionregistrationv1.Deny))
	err = waitRefused(t, c, "default", func(i int) *corev1.ConfigMap {
		cm := labelledConfigMap(fmt.Sprintf("costly-%d", i), map[string]string{"costly": "1"})
		cm.Data = map[string]string{}
		for k := 0; k < 40; k++ {
			cm.Data[fmt.Sprintf("key-%d", k)] = "v"
		}
		return cm
	})
	if want := "cost limit exceeded"; !strings.Contains(err.Error(), want) {
		t.Fatalf("expression over the cost limit: got %v, want %q", err, want)
	}

	// An expression that fails at runtime (a missing key) refuses with
	// failurePolicy Fail, admits with Ignore.
	for _, tc := range []struct {
		name    string
		failure admissionregistrationv1.FailurePolicyType
	}{{"fail", admissionregistrationv1.Fail}, {"ignore", admissionregistrationv1.Ignore}} {
		policy := denyLabelPolicy("runtime-"+tc.name, "x", tc.failure)
		policy.Spec.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "only-" + tc.name,
			Expression: fmt.Sprintf("has(object.metadata.labels) && %q in object.metadata.labels", "runtime-"+tc.name)}}
		policy.Spec.Validations[0].Expression = "object.data.missing == 'x'"
		createValidatingPolicy(t, c, policy, policyBinding("runtime-"+tc.name, "runtime-"+tc.name, admissionregistrationv1.Deny))
	}
	err = waitRefused(t, c, "default", func(i int) *corev1.ConfigMap {
		return labelledConfigMap(fmt.Sprintf("runtime-fail-%d", i), map[string]string{"runtime-fail": "1"})
	})
	// The ConfigMap has no data at all: the first key missing is data.
	// Upstream answers 422 (reason Invalid) with a "forbidden" message.
	if want := "expression 'object.data.missing == 'x'' resulted in error: no such key: data"; !apierrors.IsInvalid(err) ||
		!asStatus(err, &status) || status.Status().Code != 422 || !strings.Contains(err.Error(), want) {
		t.Fatalf("runtime error with failurePolicy Fail: got %v, want 422 with %q", err, want)
	}
	cm := labelledConfigMap("runtime-ignore", map[string]string{"runtime-ignore": "1"})
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("runtime error with failurePolicy Ignore: %v", err)
	}
}

func asStatus(err error, status *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	if ok {
		*status = s
	}
	return ok
}

// TestValidatingAdmissionPolicyParams: a policy's paramKind is read from
// the plane of the request: the same policy in two planes reads each
// plane's own ConfigMap; a missing param with Deny refuses.
func TestValidatingAdmissionPolicyParams(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	a, b := uniquePlane(t, "vap-params-a"), uniquePlane(t, "vap-params-b")
	ca, cb := s.Client(t, a), s.Client(t, b)
	deny := admissionregistrationv1.DenyAction
	for _, c := range []kubernetes.Interface{ca, cb} {
		policy := denyLabelPolicy("max-keys", "x", admissionregistrationv1.Fail)
		policy.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
		policy.Spec.Validations = []admissionregistrationv1.Validation{{
			Expression:        "!has(object.data) || size(object.data) <= int(params.data.max)",
			MessageExpression: "'at most ' + params.data.max + ' keys'",
		}}
		binding := policyBinding("max-keys", "max-keys", admissionregistrationv1.Deny)
		binding.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "limits", Namespace: "kube-system", ParameterNotFoundAction: &deny}
		binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "default"}}}
		createValidatingPolicy(t, c, policy, binding)
	}
	// No param yet: Deny refuses.
	err := waitRefused(t, ca, "default", func(i int) *corev1.ConfigMap { return labelledConfigMap(fmt.Sprintf("early-%d", i), nil) })
	if want := "no params found for policy binding with `Deny` parameterNotFoundAction"; !strings.Contains(err.Error(), want) {
		t.Fatalf("missing param: got %v, want %q", err, want)
	}
	for c, max := range map[kubernetes.Interface]string{ca: "1", cb: "3"} {
		if _, err := c.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "limits"},
			Data: map[string]string{"max": max}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	twoKeys := func(i int) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("two-%d", i)}, Data: map[string]string{"a": "1", "b": "2"}}
	}
	framework.Eventually(t, framework.DefaultTimeout, "plane a's param refuses two keys", func(ctx context.Context) error {
		_, err := ca.CoreV1().ConfigMaps("default").Create(ctx, twoKeys(0), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "at most 1 keys") {
			return fmt.Errorf("got %v, want a refusal saying at most 1 keys", err)
		}
		return nil
	})
	if _, err := cb.CoreV1().ConfigMaps("default").Create(ctx, twoKeys(1), metav1.CreateOptions{}); err != nil {
		t.Fatalf("plane %s (max 3), two keys: %v", b, err)
	}
	if _, err := ca.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one"},
		Data: map[string]string{"a": "1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("plane %s (max 1), one key: %v", a, err)
	}
}

// TestValidatingAdmissionPolicyTypeChecking: status.typeChecking of a
// policy names the expression that does not type-check against the kind
// it matches, in the policy's plane.
func TestValidatingAdmissionPolicyTypeChecking(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	plane := uniquePlane(t, "vap-types")
	c := s.Client(t, plane)
	policy := denyLabelPolicy("typo", "x", admissionregistrationv1.Fail)
	policy.Spec.Validations = append(policy.Spec.Validations, admissionregistrationv1.Validation{Expression: "object.dataa.size() > 0"})
	if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "status.typeChecking of the policy", func(ctx context.Context) error {
		got, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "typo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation || got.Status.TypeChecking == nil {
			return fmt.Errorf("status %+v", got.Status)
		}
		w := got.Status.TypeChecking.ExpressionWarnings
		if len(w) != 1 || w[0].FieldRef != "spec.validations[1].expression" || !strings.Contains(w[0].Warning, "undefined field 'dataa'") {
			return fmt.Errorf("expression warnings %+v", w)
		}
		return nil
	})
}

// TestMutatingAdmissionPolicyPerPlane: a MutatingAdmissionPolicy sets what
// its ApplyConfiguration and JSONPatch say in its own plane only; the same
// names in another plane apply that plane's.
func TestMutatingAdmissionPolicyPerPlane(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	a, b, free := uniquePlane(t, "map-a"), uniquePlane(t, "map-b"), uniquePlane(t, "map-free")
	ca, cb, cfree := s.Client(t, a), s.Client(t, b), s.Client(t, free)
	for c, team := range map[kubernetes.Interface]string{ca: "a", cb: "b"} {
		policy := &admissionregistrationv1.MutatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "team"},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
					}}}},
				ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
				Mutations: []admissionregistrationv1.Mutation{
					{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
						Expression: fmt.Sprintf(`Object{metadata: Object.metadata{labels: {"team": %q}}}`, team)}},
					{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{
						Expression: fmt.Sprintf(`[JSONPatch{op: "add", path: "/data", value: {"patched-in": %q}}]`, team)}},
				},
			},
		}
		if _, err := c.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "team"},
			Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: "team"}}
		if _, err := c.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for c, team := range map[kubernetes.Interface]string{ca: "a", cb: "b"} {
		i := 0
		framework.Eventually(t, framework.DefaultTimeout, "team "+team+" mutation", func(ctx context.Context) error {
			i++
			cm, err := c.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap(fmt.Sprintf("cm-%d", i), nil), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if cm.Labels["team"] != team || cm.Data["patched-in"] != team {
				return fmt.Errorf("labels %v data %v, want team and patched-in %s", cm.Labels, cm.Data, team)
			}
			return nil
		})
	}
	cm, err := cfree.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap("cm", nil), metav1.CreateOptions{})
	if err != nil || len(cm.Labels) != 0 || len(cm.Data) != 0 {
		t.Fatalf("plane %s without policies: %v, labels %v data %v", free, err, cm.Labels, cm.Data)
	}
}

// TestValidatingAdmissionPolicyCustomResourceParams: a paramKind that is a
// custom resource resolves through the plane's own CRDs. In a plane
// without the CRD the binding fails to configure and its failure policy
// refuses, until the plane gets the CRD.
func TestValidatingAdmissionPolicyCustomResourceParams(t *testing.T) {
	t.Parallel()
	s := shared
	ctx := context.Background()
	a, b := uniquePlane(t, "vap-crparams-a"), uniquePlane(t, "vap-crparams-b")
	ca, cb := s.Client(t, a), s.Client(t, b)
	gizmos := schema.GroupVersionResource{Group: "example.org", Version: "v1", Resource: "gizmos"}
	createEstablished(ctx, t, s, a, crdSpec("gizmos", "Gizmo", apiextensionsv1.ClusterScoped, nil, "v1"))
	if _, err := s.Dynamic(t, a).Resource(gizmos).Create(ctx, gizmo("limits", "", map[string]any{"deny": "deny-a"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []kubernetes.Interface{ca, cb} {
		policy := denyLabelPolicy("by-gizmo", "x", admissionregistrationv1.Fail)
		policy.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "example.org/v1", Kind: "Gizmo"}
		policy.Spec.Validations = []admissionregistrationv1.Validation{{
			Expression: "object.metadata.name != params.spec.deny", Message: "denied by the gizmo"}}
		binding := policyBinding("by-gizmo", "by-gizmo", admissionregistrationv1.Deny)
		deny := admissionregistrationv1.DenyAction
		binding.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: "limits", ParameterNotFoundAction: &deny}
		createValidatingPolicy(t, c, policy, binding)
	}
	err := waitRefused(t, ca, "default", func(int) *corev1.ConfigMap { return labelledConfigMap("deny-a", nil) })
	if !strings.Contains(err.Error(), "denied by the gizmo") {
		t.Fatalf("plane %s: got %v, want the gizmo's denial", a, err)
	}
	err = waitRefused(t, cb, "default", func(i int) *corev1.ConfigMap { return labelledConfigMap(fmt.Sprintf("any-%d", i), nil) })
	if want := "failed to find resource referenced by paramKind: 'example.org/v1, Kind=Gizmo'"; !strings.Contains(err.Error(), want) {
		t.Fatalf("plane %s without the CRD: got %v, want %q", b, err, want)
	}
	createEstablished(ctx, t, s, b, crdSpec("gizmos", "Gizmo", apiextensionsv1.ClusterScoped, nil, "v1"))
	if _, err := s.Dynamic(t, b).Resource(gizmos).Create(ctx, gizmo("limits", "", map[string]any{"deny": "deny-b"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "plane "+b+" admits once its CRD and param exist", func(ctx context.Context) error {
		_, err := cb.CoreV1().ConfigMaps("default").Create(ctx, labelledConfigMap("deny-a", nil), metav1.CreateOptions{})
		return err
	})
	err = waitRefused(t, cb, "default", func(int) *corev1.ConfigMap { return labelledConfigMap("deny-b", nil) })
	if !strings.Contains(err.Error(), "denied by the gizmo") {
		t.Fatalf("plane %s: got %v, want the gizmo's denial", b, err)
	}
}
