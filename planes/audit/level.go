package audit

import (
	"fmt"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Level is how much of a plane's requests its trail records: None,
// Metadata (who, what, when, the answer's code; the default), Request
// (Metadata plus the body of every write) or RequestResponse (plus the
// answer's body of every write). Reads are recorded at Metadata whatever
// the level: a LIST's answer is the plane's state, which a trail of
// bounded size cannot hold.
type Level = auditinternal.Level

// Levels are the values Plane.spec.audit.level takes.
var Levels = []Level{auditinternal.LevelNone, auditinternal.LevelMetadata, auditinternal.LevelRequest, auditinternal.LevelRequestResponse}

// DefaultLevel is the level of a plane that sets none.
const DefaultLevel = auditinternal.LevelMetadata

// ParseLevel returns the level named s.
func ParseLevel(s string) (Level, error) {
	for _, l := range Levels {
		if string(l) == s {
			return l, nil
		}
	}
	return "", fmt.Errorf("unknown audit level %q: want None, Metadata, Request or RequestResponse", s)
}

// writeVerbs are the verbs whose bodies Request and RequestResponse record.
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// policyOf is the upstream audit policy of level l. Every level but None
// omits the RequestReceived stage (a request is one event, at its end; a
// watch two: when it starts and when it ends) and managed fields.
func policyOf(l Level) *auditinternal.Policy {
	p := &auditinternal.Policy{
		OmitStages:        []auditinternal.Stage{auditinternal.StageRequestReceived},
		OmitManagedFields: true,
	}
	if l == auditinternal.LevelRequest || l == auditinternal.LevelRequestResponse {
		p.Rules = append(p.Rules, auditinternal.PolicyRule{Level: l, Verbs: writeVerbs})
	}
	if l == auditinternal.LevelNone {
		p.Rules = append(p.Rules, auditinternal.PolicyRule{Level: auditinternal.LevelNone})
	} else {
		p.Rules = append(p.Rules, auditinternal.PolicyRule{Level: auditinternal.LevelMetadata})
	}
	return p
}

// Evaluator is the server's audit policy: upstream's evaluator of the
// level the request's plane asked for (Authenticator put it on the user).
// A request without one (failed authentication, or a plane at None) is
// not audited: a trail records what its plane's identities did, and an
// anonymous client must not be able to fill another's trail with 401s.
type Evaluator struct {
	byLevel map[Level]audit.PolicyRuleEvaluator
}

// NewEvaluator returns the evaluator of every level.
func NewEvaluator() *Evaluator {
	e := &Evaluator{byLevel: map[Level]audit.PolicyRuleEvaluator{}}
	for _, l := range Levels {
		e.byLevel[l] = policy.NewPolicyRuleEvaluator(policyOf(l))
	}
	return e
}

// EvaluatePolicyRule implements audit.PolicyRuleEvaluator.
func (e *Evaluator) EvaluatePolicyRule(attrs authorizer.Attributes) audit.RequestAuditConfig {
	if u, ok := attrs.GetUser().(*planeUser); ok {
		if byLevel, known := e.byLevel[u.level]; known {
			return byLevel.EvaluatePolicyRule(attrs)
		}
		return e.byLevel[DefaultLevel].EvaluatePolicyRule(attrs)
	}
	return audit.RequestAuditConfig{Level: auditinternal.LevelNone}
}
