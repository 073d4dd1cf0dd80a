package apiserver

import (
	"net/http"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"kplane.dev/kplane/planes/audit"
	"kplane.dev/kplane/planes/lifecycle"
)

// AuditConfig configures the planes' audit trails.
type AuditConfig struct {
	// BufferEvents per plane in memory; 0 turns auditing off.
	BufferEvents int
	// Dir holds a log per plane (empty: memory only), rotated at
	// MaxFileBytes.
	Dir          string
	MaxFileBytes int64
	// DefaultLevel is the level of a plane whose Plane sets none.
	DefaultLevel audit.Level
}

// auditParts are the audit's pieces the chain and the lifecycle use; nil
// when auditing is off.
type auditParts struct {
	trails *audit.Trails
	planes *auditPlanes
}

// newAudit builds the trails and puts upstream's audit filter to work:
// the server's audit backend and policy are kplane's plane-aware ones.
func (c *Config) newAudit(genericConfig *genericapiserver.Config) (*auditParts, error) {
	if c.Audit.BufferEvents == 0 {
		return nil, nil
	}
	level := c.Audit.DefaultLevel
	if level == "" {
		level = audit.DefaultLevel
	}
	lookup := &auditPlanes{defaultLevel: level}
	trails, err := audit.NewTrails(audit.Config{
		BufferEvents: c.Audit.BufferEvents, Dir: c.Audit.Dir, MaxFileBytes: c.Audit.MaxFileBytes, Planes: lookup,
	})
	if err != nil {
		return nil, err
	}
	genericConfig.AuditBackend = trails
	genericConfig.AuditPolicyRuleEvaluator = audit.NewEvaluator()
	return &auditParts{trails: trails, planes: lookup}, nil
}

// filter serves /audit and unwraps the audit's user tag; without audit
// nothing is done.
func (a *auditParts) filter(next http.Handler, handler *audit.Handler) http.Handler {
	if a == nil {
		return next
	}
	return handler.Filter(next)
}

// auditPlanes answers the audit's questions from the plane manager: which
// planes exist (as soon as a request provisions or loads one) and their
// Planes' levels; bound once the manager exists.
type auditPlanes struct {
	defaultLevel audit.Level
	manager      atomic.Pointer[lifecycle.Manager]
}

// Lookup implements audit.Planes: a plane's uid and spec.audit.level.
func (p *auditPlanes) Lookup(plane string) (types.UID, audit.Level, bool) {
	manager := p.manager.Load()
	if manager == nil {
		return "", "", false
	}
	uid, exists := manager.UID(plane)
	if !exists {
		return "", "", false
	}
	level := p.defaultLevel
	if u, found := manager.Object(plane); found {
		// The CRD admits only the known levels; a Plane stored before it
		// did keeps the default rather than reach the evaluator unknown.
		if s, set, _ := unstructured.NestedString(u.Object, "spec", "audit", "level"); set && s != "" {
			if l, err := audit.ParseLevel(s); err == nil {
				level = l
			}
		}
	}
	return uid, level, true
}

func (a *auditParts) trailsOrNil() *audit.Trails {
	if a == nil {
		return nil
	}
	return a.trails
}

// withAudit adds the trails to what forgets deleted planes.
func (c CompletedConfig) withAudit(forget []lifecycle.Forgetter) []lifecycle.Forgetter {
	if c.audit == nil {
		return forget
	}
	return append(forget, c.audit.trails)
}
