package lifecycle

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kplane.dev/kplane/planes/limits"
)

// Limits implements limits.Source: what plane's Plane sets.
func (m *Manager) Limits(plane string) *limits.Limits {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if s := m.state[plane]; s != nil {
		return s.limits
	}
	return nil
}

// Watches returns the watches open in plane.
func (m *Manager) Watches(plane string) int { return m.requests.watches(plane) }

// reserveForUser counts a first request of user making plane against
// --max-planes-per-user: the planes it made before (their Planes carry
// CreatedByAnnotation) and those it is making now; concurrent first
// requests to one plane count once. release must be called once the Plane
// is created or not.
func (m *Manager) reserveForUser(user, plane string) (release func(), err error) {
	limit := m.config.MaxPlanesPerUser
	if limit <= 0 {
		return func() {}, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	made := map[string]bool{}
	for name := range m.provisioning[user] {
		made[name] = true
	}
	for name, s := range m.state {
		if s.createdBy == user && !s.terminating {
			made[name] = true
		}
	}
	if !made[plane] && len(made) >= limit {
		return nil, apierrors.NewForbidden(schema.GroupResource{Group: GVR.Group, Resource: GVR.Resource}, plane, fmt.Errorf(
			"plane limit per user reached: %s made %d planes by first requests and the server allows %d (--max-planes-per-user); delete some of them",
			user, len(made), limit))
	}
	if m.provisioning[user] == nil {
		m.provisioning[user] = map[string]int{}
	}
	m.provisioning[user][plane]++
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.provisioning[user][plane]--; m.provisioning[user][plane] <= 0 {
			delete(m.provisioning[user], plane)
		}
		if len(m.provisioning[user]) == 0 {
			delete(m.provisioning, user)
		}
	}, nil
}

// usageOf reads the usage a Plane's status reports, so that a restart
// does not write it again unchanged.
func usageOf(u *unstructured.Unstructured) Usage {
	var out Usage
	// Read in place: the converter copies what it keeps.
	field, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "usage")
	if content, ok := field.(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(content, &out)
	}
	return out
}
