package fleet

import (
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

	"kplane.dev/kplane/planes/lifecycle"
)

// SimulationAnnotation on a member's Plane is the digest of the Fleet
// simulation it was last given. A member is given the Fleet's simulation
// again only when the digests differ, that is when the Fleet's changed:
// a change made to one member's simulation (a fault injected into one
// episode) stays until then.
const SimulationAnnotation = "kplane.dev/fleet-simulation"

// simulationDigest names a Fleet simulation; "" for none.
func simulationDigest(simulation *lifecycle.SimulationSpec) string {
	if simulation == nil {
		return ""
	}
	data, err := json.Marshal(simulation)
	if err != nil {
		// A typed spec decoded from the API always encodes.
		panic(fmt.Sprintf("encoding a Fleet simulation: %v", err))
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// applySimulation gives the Fleet's simulation to each owned member (a
// non-empty UID in owned) that was not given this one yet.
func (c *Controller) applySimulation(ctx context.Context, f *Fleet, names []string, owned []types.UID) error {
	digest := simulationDigest(f.Spec.Simulation)
	var stale []*unstructured.Unstructured
	for i, uid := range owned {
		if uid == "" {
			continue
		}
		obj, ok, _ := c.config.Planes.GetIndexer().GetByKey(names[i])
		if !ok {
			continue
		}
		p := obj.(*unstructured.Unstructured)
		if given, _ := givenSimulation(p); p.GetUID() == uid && given != digest {
			stale = append(stale, p)
		}
	}
	idx := make([]int, len(stale))
	for i := range idx {
		idx[i] = i
	}
	return c.forEach(ctx, idx, func(ctx context.Context, i int) error {
		return c.giveSimulation(ctx, stale[i], f.Spec.Simulation, digest)
	})
}

// giveSimulation replaces plane p's spec.simulation with simulation (nil:
// removes it) and records digest, unless p changed since the informer
// showed it: the next reconcile sees the change.
func (c *Controller) giveSimulation(ctx context.Context, p *unstructured.Unstructured, simulation *lifecycle.SimulationSpec, digest string) error {
	patch, err := json.Marshal(simulationPatch(p, simulation, digest))
	if err != nil {
		return fmt.Errorf("encoding the simulation of plane %s: %w", p.GetName(), err)
	}
	_, err = c.planes.Patch(ctx, p.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("giving plane %s its Fleet's simulation: %w", p.GetName(), err)
	}
	return nil
}

// givenSimulation reads p's SimulationAnnotation in place (GetAnnotations
// copies every annotation of every member a reconcile looks at).
func givenSimulation(p *unstructured.Unstructured) (digest string, ok bool) {
	digest, ok, _ = unstructured.NestedString(p.Object, "metadata", "annotations", SimulationAnnotation)
	return digest, ok
}

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// simulationPatch is the JSON patch giving p simulation and digest. It
// replaces spec.simulation whole (a merge patch would keep the fields the
// Fleet no longer sets) and carries p's resourceVersion, so that a
// concurrent change of p makes it conflict instead of being overwritten.
func simulationPatch(p *unstructured.Unstructured, simulation *lifecycle.SimulationSpec, digest string) []patchOp {
	ops := []patchOp{{Op: "replace", Path: "/metadata/resourceVersion", Value: p.GetResourceVersion()}}
	spec, hasSpec := p.Object["spec"].(map[string]any)
	switch _, hasSimulation := spec["simulation"]; {
	case simulation != nil && !hasSpec:
		ops = append(ops, patchOp{Op: "add", Path: "/spec", Value: map[string]any{"simulation": simulation}})
	case simulation != nil:
		ops = append(ops, patchOp{Op: "add", Path: "/spec/simulation", Value: simulation})
	case hasSimulation:
		ops = append(ops, patchOp{Op: "remove", Path: "/spec/simulation"})
	}
	annotation := "/metadata/annotations/" + strings.ReplaceAll(SimulationAnnotation, "/", "~1")
	_, annotated := givenSimulation(p)
	metadata, _ := p.Object["metadata"].(map[string]any)
	_, hasAnnotations := metadata["annotations"]
	switch {
	case digest == "" && annotated:
		ops = append(ops, patchOp{Op: "remove", Path: annotation})
	case digest == "":
	case !hasAnnotations:
		ops = append(ops, patchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{SimulationAnnotation: digest}})
	default:
		ops = append(ops, patchOp{Op: "add", Path: annotation, Value: digest})
	}
	return ops
}
