package policies

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCompileValidating: a policy with variables and message expressions
// compiles in upstream's environment.
func TestCompileValidating(t *testing.T) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
		Validations: []admissionregistrationv1.Validation{{Expression: "object.metadata.name != ''", MessageExpression: "'named ' + object.metadata.name"}},
		Variables:   []admissionregistrationv1.Variable{{Name: "n", Expression: "object.metadata.name"}},
	}}
	if err := compileValidating(policy).CompileError(); err != nil {
		t.Fatalf("valid policy: %v", err)
	}
}

// TestCompileMutating: one patcher per mutation, errors kept.
func TestCompileMutating(t *testing.T) {
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
		Mutations: []admissionregistrationv1.Mutation{
			{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
				Expression: `Object{metadata: Object.metadata{labels: {"a": "b"}}}`}},
			{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{
				Expression: `[JSONPatch{op: "add", path: "/data", value: {"a": "b"}}]`}},
		},
	}}
	e := compileMutating(policy)
	if e.Error != nil || len(e.Mutators) != 2 {
		t.Fatalf("got error %v and %d mutators, want none and 2", e.Error, len(e.Mutators))
	}
}

// TestContentKey: planes holding the same policy share its compilation;
// metadata other than the name does not matter, the spec does.
func TestContentKey(t *testing.T) {
	policy := func(plane, rv, expression string) *admissionregistrationv1.ValidatingAdmissionPolicy {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: rv, Annotations: map[string]string{"kplane.dev/plane": plane}},
			Spec:       admissionregistrationv1.ValidatingAdmissionPolicySpec{Validations: []admissionregistrationv1.Validation{{Expression: expression}}},
		}
	}
	key := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) string {
		k, err := contentKey(p)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if key(policy("a", "1", "true")) != key(policy("b", "7", "true")) {
		t.Error("the same policy in two planes has two keys")
	}
	if key(policy("a", "1", "true")) == key(policy("a", "1", "false")) {
		t.Error("two specs share a key")
	}
	renamed := policy("a", "1", "true")
	renamed.Name = "q"
	if key(renamed) == key(policy("a", "1", "true")) {
		t.Error("two names share a key")
	}
}
