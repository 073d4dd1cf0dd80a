package volumes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/simulation/informers"
	"kplane.dev/kplane/planes/simulation/planens"
	"kplane.dev/kplane/planes/workers"
)

// Provisioner is the provisioned-by annotation of the simulated volumes.
const Provisioner = "simulated.kplane.dev"

// Workers bind claims of all planes at once.
const Workers = 4

// work is a claim to bind (volume empty) or a volume to release.
type work struct {
	// claim is the folded namespace/name key of the claim.
	claim string
	// volume is the name of the released claim's volume.
	volume string
}

// Binder provisions and binds a volume for every unbound claim.
type Binder struct {
	// claims holds every plane's claims, plane folded in (planens).
	claims cache.SharedIndexInformer
	// folding writes claims; routed writes the cluster-scoped volumes to
	// the plane of each call's context.
	folding, routed kubernetes.Interface
	queue           workqueue.TypedRateLimitingInterface[work]
}

// New returns a binder over the shared claim informer.
func New(folding, routed kubernetes.Interface, inf *informers.Informers) (*Binder, error) {
	b := &Binder{
		claims: inf.PersistentVolumeClaims.Informer(), folding: folding, routed: routed,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[work](),
			workqueue.TypedRateLimitingQueueConfig[work]{Name: "kplane_simulation_volumes"}),
	}
	if _, err := b.claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    b.claimChanged,
		UpdateFunc: func(_, obj any) { b.claimChanged(obj) },
		DeleteFunc: b.claimDeleted,
	}); err != nil {
		return nil, fmt.Errorf("volume binder: %w", err)
	}
	return b, nil
}

// Run binds until ctx is done.
func (b *Binder) Run(ctx context.Context) {
	workers.Run(ctx, b.queue, Workers, "claim", b.sync)
}

func (b *Binder) claimChanged(obj any) {
	claim, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || bound(claim) || claim.DeletionTimestamp != nil {
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(claim)
	b.queue.Add(work{claim: key})
}

func (b *Binder) claimDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	claim, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok || claim.Spec.VolumeName != volumeName(claim) {
		return
	}
	key, _ := cache.MetaNamespaceKeyFunc(claim)
	b.queue.Add(work{claim: key, volume: claim.Spec.VolumeName})
}

// bound reports whether claim needs nothing more from the binder.
func bound(claim *corev1.PersistentVolumeClaim) bool {
	return claim.Spec.VolumeName != "" && claim.Status.Phase == corev1.ClaimBound
}

// volumeName is the name of the volume provisioned for claim, as upstream
// provisioners name theirs.
func volumeName(claim *corev1.PersistentVolumeClaim) string { return "pvc-" + string(claim.UID) }

func (b *Binder) sync(ctx context.Context, w work) error {
	plane := planens.Plane(w.claim)
	if plane == "" {
		return nil
	}
	ctx = planes.WithPlane(ctx, plane)
	if w.volume != "" {
		return b.release(ctx, w.volume)
	}
	obj, exists, err := b.claims.GetIndexer().GetByKey(w.claim)
	if err != nil || !exists {
		return err
	}
	claim := obj.(*corev1.PersistentVolumeClaim)
	if bound(claim) || claim.DeletionTimestamp != nil || claim.Spec.Selector != nil {
		// A claim with a selector asks for a volume made by hand.
		return nil
	}
	return b.bind(ctx, claim.DeepCopy())
}

// release deletes the volume of a deleted claim (reclaim policy Delete).
func (b *Binder) release(ctx context.Context, volume string) error {
	err := b.routed.CoreV1().PersistentVolumes().Delete(ctx, volume, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting volume %s: %w", volume, err)
	}
	return nil
}

// bind provisions the claim's volume, then binds both, in the order the
// PV controller writes them: the volume's claimRef, the claim's
// volumeName, the claim's status, the volume's status.
func (b *Binder) bind(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	volume, err := b.provision(ctx, claim)
	if err != nil {
		return err
	}
	if claim.Spec.VolumeName == "" {
		claim.Spec.VolumeName = volume.Name
		if claim.Annotations == nil {
			claim.Annotations = map[string]string{}
		}
		claim.Annotations["pv.kubernetes.io/bind-completed"] = "yes"
		claim.Annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
		if claim, err = b.folding.CoreV1().PersistentVolumeClaims(claim.Namespace).Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("binding claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
	}
	claim.Status.Phase = corev1.ClaimBound
	claim.Status.AccessModes = volume.Spec.AccessModes
	claim.Status.Capacity = volume.Spec.Capacity
	if _, err := b.folding.CoreV1().PersistentVolumeClaims(claim.Namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("marking claim %s/%s bound: %w", claim.Namespace, claim.Name, err)
	}
	if volume.Status.Phase != corev1.VolumeBound {
		volume.Status.Phase = corev1.VolumeBound
		if _, err := b.routed.CoreV1().PersistentVolumes().UpdateStatus(ctx, volume, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("marking volume %s bound: %w", volume.Name, err)
		}
	}
	return nil
}

// provision creates the claim's volume, or returns the one made before.
func (b *Binder) provision(ctx context.Context, claim *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, error) {
	name := volumeName(claim)
	volumes := b.routed.CoreV1().PersistentVolumes()
	volume, err := volumes.Create(ctx, newVolume(name, claim), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		volume, err = volumes.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("provisioning volume %s for claim %s/%s: %w", name, claim.Namespace, claim.Name, err)
	}
	return volume, nil
}

func newVolume(name string, claim *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	size := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	accessModes := claim.Spec.AccessModes
	if len(accessModes) == 0 {
		accessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	class := ""
	if claim.Spec.StorageClassName != nil {
		class = *claim.Spec.StorageClassName
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			"pv.kubernetes.io/provisioned-by": Provisioner,
		}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   accessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              class,
			VolumeMode:                    claim.Spec.VolumeMode,
			// A volume needs a source; this one is never mounted anywhere.
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: Provisioner, VolumeHandle: name,
			}},
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: planens.Strip(claim.Namespace), Name: claim.Name, UID: claim.UID,
			},
		},
	}
}
