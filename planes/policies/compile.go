package policies

import (
	"fmt"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// The compilers below are upstream's (validating.compilePolicy and
// mutating.compilePolicy, k8s.io/apiserver v0.37): upstream keeps them
// unexported and reachable only through a plugin that runs informers. They
// only assemble upstream's exported CEL compiler, validator and patchers,
// with the same environment (strict cost, the default compatibility
// version) and so the same cost limits.

var (
	baseEnvOnce sync.Once
	baseEnv     *environment.EnvSet
)

func compositionEnv() *environment.EnvSet {
	baseEnvOnce.Do(func() {
		baseEnv = environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	})
	return baseEnv
}

// compileValidating is upstream's compilation of a
// ValidatingAdmissionPolicy; an error is kept in the validator and reported
// when the policy is evaluated, as upstream.
func compileValidating(policy *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	hasParam := policy.Spec.ParamKind != nil
	optionalVars := plugincel.OptionalVariableDeclarations{HasParams: hasParam, HasAuthorizer: true}
	expressionOptionalVars := plugincel.OptionalVariableDeclarations{HasParams: hasParam, HasAuthorizer: false}
	failurePolicy := policy.Spec.FailurePolicy
	compiler, err := plugincel.NewCompositedCompiler(compositionEnv())
	if err != nil {
		return validating.NewValidator(nil, nil, nil, nil, failurePolicy, err)
	}
	compiler.CompileAndStoreVariables(variables(policy.Spec.Variables), optionalVars, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if conditions := policy.Spec.MatchConditions; len(conditions) > 0 {
		accessors := make([]plugincel.ExpressionAccessor, len(conditions))
		for i := range conditions {
			accessors[i] = (*matchconditions.MatchCondition)(&conditions[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(accessors, optionalVars, environment.StoredExpressions),
			failurePolicy, "policy", "validate", policy.Name)
	}
	validations := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(policy.Spec.Validations))
	for i, v := range policy.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	annotations := make([]plugincel.ExpressionAccessor, len(policy.Spec.AuditAnnotations))
	for i, a := range policy.Spec.AuditAnnotations {
		annotations[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	return validating.NewValidator(
		compiler.CompileCondition(validations, optionalVars, environment.StoredExpressions),
		matcher,
		compiler.CompileCondition(annotations, optionalVars, environment.StoredExpressions),
		compiler.CompileCondition(messages, expressionOptionalVars, environment.StoredExpressions),
		failurePolicy,
		nil,
	)
}

// compileMutating is upstream's compilation of a MutatingAdmissionPolicy.
func compileMutating(policy *admissionregistrationv1.MutatingAdmissionPolicy) mutating.PolicyEvaluator {
	opts := plugincel.OptionalVariableDeclarations{HasParams: policy.Spec.ParamKind != nil, HasAuthorizer: true}
	compiler, err := plugincel.NewCompositedCompiler(compositionEnv())
	if err != nil {
		return mutating.PolicyEvaluator{Error: &apiservercel.Error{
			Type:   apiservercel.ErrorTypeInternal,
			Detail: fmt.Sprintf("failed to initialize CEL compiler: %v", err),
		}}
	}
	compiler.CompileAndStoreVariables(variables(policy.Spec.Variables), opts, environment.StoredExpressions)
	var matcher matchconditions.Matcher
	if conditions := policy.Spec.MatchConditions; len(conditions) > 0 {
		accessors := make([]plugincel.ExpressionAccessor, len(conditions))
		for i := range conditions {
			accessors[i] = (*matchconditions.MatchCondition)(&conditions[i])
		}
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(accessors, opts, environment.StoredExpressions),
			policy.Spec.FailurePolicy, "policy", "validate", policy.Name)
	}
	patchOptions := opts
	patchOptions.HasPatchTypes = true
	var patchers []patch.Patcher
	for _, m := range policy.Spec.Mutations {
		switch {
		case m.PatchType == admissionregistrationv1.PatchTypeJSONPatch && m.JSONPatch != nil:
			accessor := &patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}
			patchers = append(patchers, patch.NewJSONPatcher(compiler.CompileMutatingEvaluator(accessor, patchOptions, environment.StoredExpressions)))
		case m.PatchType == admissionregistrationv1.PatchTypeApplyConfiguration && m.ApplyConfiguration != nil:
			accessor := &patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}
			patchers = append(patchers, patch.NewApplyConfigurationPatcher(compiler.CompileMutatingEvaluator(accessor, patchOptions, environment.StoredExpressions)))
		}
	}
	return mutating.PolicyEvaluator{Matcher: matcher, Mutators: patchers, CompositedCompiler: compiler}
}

func variables(vars []admissionregistrationv1.Variable) []plugincel.NamedExpressionAccessor {
	if vars == nil {
		return nil
	}
	out := make([]plugincel.NamedExpressionAccessor, len(vars))
	for i, v := range vars {
		out[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	return out
}
