package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"kplane.dev/kplane/test/e2e/framework"
)

// ghostOwners are references to owners that never existed. The collector
// confirms each absence with a consistent read, so many of them hold its
// decision open long enough for a client to change the dependent between
// the collector's read and its delete.
func ghostOwners(n int, prefix string) []metav1.OwnerReference {
	refs := make([]metav1.OwnerReference, n)
	for i := range refs {
		refs[i] = metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap",
			Name: fmt.Sprintf("%s-ghost-%d", prefix, i), UID: uuid.NewUUID()}
	}
	return refs
}

// TestGCKeepsDependentThatGainedAnOwner: a dependent whose only owners are
// gone is updated at once to add a live owner. The collector may have
// decided on the version without it, but its deletion is pinned to that
// version: the dependent must stay, losing only its dangling references.
// Repeated, so that the update lands inside the collector's decision.
func TestGCKeepsDependentThatGainedAnOwner(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "gc-pin")
	c := shared.Client(t, plane)
	ctx := t.Context()
	cms := c.CoreV1().ConfigMaps("default")
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}

	// The collector confirms the ghosts from the watch cache: it deletes
	// first in half the rounds or more (the update won 13-18 of 40 on 2
	// cores). Each round the update wins checks the pinning; enough of
	// them must.
	const rounds, enough = 40, 4
	raced := 0
	for i := range rounds {
		name := fmt.Sprintf("dependent-%d", i)
		dep, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name,
			OwnerReferences: ghostOwners(100, name)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dep.OwnerReferences = append(dep.OwnerReferences, live)
		if _, err := cms.Update(ctx, dep, metav1.UpdateOptions{}); apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			// The collector was faster than the update: it deleted a
			// dependent that had no live owner, rightly.
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		raced++
		framework.Eventually(t, framework.DefaultTimeout, name+" keeps only its live owner", func(ctx context.Context) error {
			got, err := cms.Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return framework.Stop(fmt.Errorf("round %d: %s was deleted although it had a live owner", i, name))
			case err != nil:
				return err
			case len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != owner.UID:
				return fmt.Errorf("%d owner references left", len(got.OwnerReferences))
			}
			return nil
		})
	}
	t.Logf("the update reached the dependent before the collector's deletion in %d of %d rounds", raced, rounds)
	if raced < enough {
		t.Fatalf("the update reached the dependent before the collector in %d of %d rounds only", raced, rounds)
	}
}

// circleMember is an object that can be created, given owners and read.
type circleMember struct {
	kind, apiVersion string
	create           func(name string) (metav1.Object, error)
	setOwner         func(name string, ref metav1.OwnerReference) error
	get              func(name string) error
	delete           func(name string, opts metav1.DeleteOptions) error
}

func configMapMembers(ctx context.Context, c kubernetes.Interface, ns string) circleMember {
	cms := c.CoreV1().ConfigMaps(ns)
	return circleMember{kind: "ConfigMap", apiVersion: "v1",
		create: func(name string) (metav1.Object, error) {
			return cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		},
		setOwner: func(name string, ref metav1.OwnerReference) error {
			_, err := cms.Patch(ctx, name, types.MergePatchType, ownerPatch(ref), metav1.PatchOptions{})
			return err
		},
		get: func(name string) error { _, err := cms.Get(ctx, name, metav1.GetOptions{}); return err },
		delete: func(name string, opts metav1.DeleteOptions) error {
			return cms.Delete(ctx, name, opts)
		},
	}
}

// ownerPatch sets ref as the only ownerReference.
func ownerPatch(ref metav1.OwnerReference) []byte {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{ref}}})
	return patch
}

// podMembers are Pods no node runs (no nodeName): deleted at once, as
// upstream deletes unscheduled Pods.
func podMembers(ctx context.Context, c kubernetes.Interface, ns string) circleMember {
	pods := c.CoreV1().Pods(ns)
	return circleMember{kind: "Pod", apiVersion: "v1",
		create: func(name string) (metav1.Object, error) {
			return pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, metav1.CreateOptions{})
		},
		setOwner: func(name string, ref metav1.OwnerReference) error {
			_, err := pods.Patch(ctx, name, types.MergePatchType, ownerPatch(ref), metav1.PatchOptions{})
			return err
		},
		get: func(name string) error { _, err := pods.Get(ctx, name, metav1.GetOptions{}); return err },
		delete: func(name string, opts metav1.DeleteOptions) error {
			return pods.Delete(ctx, name, opts)
		},
	}
}

// TestGCDependencyCircle is upstream's conformance spec "should not be
// blocked by dependency circle": three objects own each other in a circle
// (controller, blockOwnerDeletion); deleting one in the foreground deletes
// all three.
func TestGCDependencyCircle(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "gc-circle")
	c := shared.Client(t, plane)
	for _, m := range []circleMember{configMapMembers(t.Context(), c, "default"), podMembers(t.Context(), c, "default")} {
		t.Run(m.kind, func(t *testing.T) {
			names := []string{"circle-1", "circle-2", "circle-3"}
			objs := make([]metav1.Object, len(names))
			for i, name := range names {
				obj, err := m.create(name)
				if err != nil {
					t.Fatal(err)
				}
				objs[i] = obj
			}
			// 1 is owned by 3, 2 by 1, 3 by 2.
			for i, name := range names {
				owner := objs[(i+len(objs)-1)%len(objs)]
				ref := metav1.OwnerReference{APIVersion: m.apiVersion, Kind: m.kind, Name: owner.GetName(), UID: owner.GetUID(),
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
				if err := m.setOwner(name, ref); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.delete(names[0], metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
				t.Fatal(err)
			}
			for _, name := range names {
				framework.Eventually(t, framework.DefaultTimeout, m.kind+" "+name+" deleted", func(context.Context) error {
					if err := m.get(name); !apierrors.IsNotFound(err) {
						return fmt.Errorf("not deleted: %v", err)
					}
					return nil
				})
			}
		})
	}
}
