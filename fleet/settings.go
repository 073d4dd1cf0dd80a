package fleet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// The annotations on a member's Plane holding the digest of the Fleet's
// setting it was last given. A member is given a setting again only when
// the digests differ, that is when the Fleet's changed: a change made to
// one member's own setting (a fault injected into one episode) stays
// until then, and a steady Fleet writes nothing.
const (
	SimulationAnnotation = "kplane.dev/fleet-simulation"
	LimitsAnnotation     = "kplane.dev/fleet-limits"
	AuditAnnotation      = "kplane.dev/fleet-audit"
)

// memberSetting is one field of the members' Plane spec that the Fleet
// decides when it sets it.
type memberSetting struct {
	// field is the name of the field in the Plane's spec (and the Fleet's).
	field      string
	annotation string
	// value is the Fleet's, as JSON; nil when the Fleet does not set it.
	value json.RawMessage
}

// digest names the setting's value; "" for none.
func (s memberSetting) digest() string {
	if s.value == nil {
		return ""
	}
	sum := sha256.Sum256(s.value)
	return hex.EncodeToString(sum[:8])
}

// memberSettings are what f decides of its members' Planes.
func memberSettings(f *Fleet) ([]memberSetting, error) {
	var settings []memberSetting
	for _, field := range []struct {
		name, annotation string
		value            any // a typed pointer: nil encodes as null
	}{
		{"simulation", SimulationAnnotation, f.Spec.Simulation},
		{"limits", LimitsAnnotation, f.Spec.Limits},
		{"audit", AuditAnnotation, f.Spec.Audit},
	} {
		data, err := json.Marshal(field.value)
		if err != nil {
			return nil, fmt.Errorf("encoding spec.%s of Fleet %s: %w", field.name, f.Name, err)
		}
		s := memberSetting{field: field.name, annotation: field.annotation}
		if !bytes.Equal(data, []byte("null")) {
			s.value = data
		}
		settings = append(settings, s)
	}
	return settings, nil
}

// given reads p's annotation of s in place (GetAnnotations copies every
// annotation of every member a reconcile looks at).
func (s memberSetting) given(p *unstructured.Unstructured) (digest string, ok bool) {
	digest, ok, _ = unstructured.NestedString(p.Object, "metadata", "annotations", s.annotation)
	return digest, ok
}

// applySettings gives each owned member (a non-empty UID in owned) the
// Fleet's settings it was not given yet.
func (c *Controller) applySettings(ctx context.Context, f *Fleet, names []string, owned []types.UID) error {
	settings, err := memberSettings(f)
	if err != nil {
		return err
	}
	type staleMember struct {
		plane *unstructured.Unstructured
		ops   []patchOp
	}
	var stale []staleMember
	for i, uid := range owned {
		if uid == "" {
			continue
		}
		obj, ok, _ := c.config.Planes.GetIndexer().GetByKey(names[i])
		if !ok {
			continue
		}
		if p := obj.(*unstructured.Unstructured); p.GetUID() == uid {
			if ops := settingsPatch(p, settings); len(ops) > 0 {
				stale = append(stale, staleMember{p, ops})
			}
		}
	}
	idx := make([]int, len(stale))
	for i := range idx {
		idx[i] = i
	}
	return c.forEach(ctx, idx, func(ctx context.Context, i int) error {
		return c.giveSettings(ctx, stale[i].plane, stale[i].ops)
	})
}

// giveSettings applies ops (settingsPatch's) to plane p, unless p changed
// since the informer showed it: the next reconcile sees the change.
func (c *Controller) giveSettings(ctx context.Context, p *unstructured.Unstructured, ops []patchOp) error {
	// The resourceVersion first: a concurrent change of p makes the
	// patch conflict instead of being overwritten.
	ops = append([]patchOp{{Op: "replace", Path: "/metadata/resourceVersion", Value: p.GetResourceVersion()}}, ops...)
	patch, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("encoding the settings of plane %s: %w", p.GetName(), err)
	}
	_, err = c.planes.Patch(ctx, p.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("giving plane %s its Fleet's settings: %w", p.GetName(), err)
	}
	return nil
}

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// settingsPatch is the JSON patch giving p each setting whose digest it
// does not carry; none when p has them all. A setting replaces the
// field whole: a merge patch would keep what the Fleet no longer sets.
func settingsPatch(p *unstructured.Unstructured, settings []memberSetting) []patchOp {
	var ops []patchOp
	spec, hasSpec := p.Object["spec"].(map[string]any)
	metadata, _ := p.Object["metadata"].(map[string]any)
	_, hasAnnotations := metadata["annotations"]
	for _, s := range settings {
		digest := s.digest()
		given, annotated := s.given(p)
		if given == digest {
			continue
		}
		_, hasField := spec[s.field]
		switch {
		case s.value != nil && !hasSpec:
			ops = append(ops, patchOp{Op: "add", Path: "/spec", Value: map[string]any{}})
			hasSpec, spec = true, map[string]any{}
			fallthrough
		case s.value != nil:
			ops = append(ops, patchOp{Op: "add", Path: "/spec/" + s.field, Value: s.value})
		case hasField:
			ops = append(ops, patchOp{Op: "remove", Path: "/spec/" + s.field})
		}
		annotation := "/metadata/annotations/" + strings.ReplaceAll(s.annotation, "/", "~1")
		switch {
		case digest == "" && annotated:
			ops = append(ops, patchOp{Op: "remove", Path: annotation})
		case digest == "":
		case !hasAnnotations:
			ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{}})
			hasAnnotations = true
			fallthrough
		default:
			ops = append(ops, patchOp{Op: "add", Path: annotation, Value: digest})
		}
	}
	return ops
}

// releaseSettings is the merge patch that takes a released member's
// digests away: the member keeps its settings as its own.
func releaseSettings() map[string]any {
	return map[string]any{SimulationAnnotation: nil, LimitsAnnotation: nil, AuditAnnotation: nil}
}
