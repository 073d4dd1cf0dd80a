package policies

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
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
