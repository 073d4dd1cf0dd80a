// Package controller reconciles RayServes into a Deployment, a Service and
// a ConfigMap each.
package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	servingv1alpha1 "kplane.dev/kplane/examples/rayserve-operator/api/v1alpha1"
)

// ConfigHashAnnotation on the Deployment's pod template names the serve
// configuration it runs, so a configuration change rolls the pods.
const ConfigHashAnnotation = "serving.example.com/config-hash"

// RayServeReconciler reconciles RayServes.
type RayServeReconciler struct {
	client.Client
	Scheme *runtime.Scheme
}

// +kubebuilder:rbac:groups=serving.example.com,resources=rayserves,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=serving.example.com,resources=rayserves/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps,verbs=get;list;watch;create;update;patch;delete

// Reconcile brings the RayServe's children in line with its spec and
// reports what it saw in its status. Deleting a RayServe needs nothing
// here: its children carry its owner reference and the garbage collector
// deletes them.
func (r *RayServeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rs servingv1alpha1.RayServe
	if err := r.Get(ctx, req.NamespacedName, &rs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !rs.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	hash, err := r.reconcileConfigMap(ctx, &rs)
	var deployment *appsv1.Deployment
	if err == nil {
		deployment, err = r.reconcileDeployment(ctx, &rs, hash)
	}
	if err == nil {
		err = r.reconcileService(ctx, &rs)
	}
	if statusErr := r.updateStatus(ctx, &rs, hash, deployment, err); statusErr != nil && err == nil {
		err = statusErr
	}
	if apierrors.IsConflict(err) {
		// Someone changed an object since we read it: start over from the
		// new version.
		return ctrl.Result{Requeue: true}, nil
	}
	return ctrl.Result{}, err
}

func labelsFor(rs *servingv1alpha1.RayServe) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "rayserve", "app.kubernetes.io/instance": rs.Name}
}

func configMapName(rs *servingv1alpha1.RayServe) string { return rs.Name + "-config" }

func (r *RayServeReconciler) reconcileConfigMap(ctx context.Context, rs *servingv1alpha1.RayServe) (string, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configMapName(rs), Namespace: rs.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		cm.Labels = labelsFor(rs)
		cm.Data = map[string]string{}
		for k, v := range rs.Spec.ServeConfig {
			cm.Data[k] = v
		}
		return controllerutil.SetControllerReference(rs, cm, r.Scheme)
	})
	if err != nil {
		return "", fmt.Errorf("configmap %s: %w", cm.Name, err)
	}
	return configHash(rs.Spec.ServeConfig), nil
}

// configHash is a stable digest of the serve configuration.
func configHash(config map[string]string) string {
	keys := make([]string, 0, len(config))
	for k := range config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%q=%q\n", k, config[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// desiredReplicas is spec.replicas, or zero while suspended.
func desiredReplicas(rs *servingv1alpha1.RayServe) int32 {
	if rs.Spec.Suspend {
		return 0
	}
	if rs.Spec.Replicas == nil {
		return 1
	}
	return *rs.Spec.Replicas
}

func (r *RayServeReconciler) reconcileDeployment(ctx context.Context, rs *servingv1alpha1.RayServe, hash string) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: rs.Name, Namespace: rs.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, d, func() error { return r.mutateDeployment(d, rs, hash) })
	if err != nil {
		return nil, fmt.Errorf("deployment %s: %w", d.Name, err)
	}
	return d, nil
}

// mutateDeployment makes d (as stored, or new) the Deployment rs wants.
func (r *RayServeReconciler) mutateDeployment(d *appsv1.Deployment, rs *servingv1alpha1.RayServe, hash string) error {
	labels := labelsFor(rs)
	replicas := desiredReplicas(rs)
	d.Labels = labels
	d.Spec.Replicas = &replicas
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
	d.Spec.Template.Labels = labels
	d.Spec.Template.Annotations = map[string]string{ConfigHashAnnotation: hash}
	pod := &d.Spec.Template.Spec
	pod.Volumes = []corev1.Volume{withVolumeDefaults(corev1.Volume{Name: "serve-config", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMapName(rs)}}}}, pod.Volumes)}
	pod.Containers = []corev1.Container{withContainerDefaults(corev1.Container{
		Name:         "ray-serve",
		Image:        rs.Spec.Image,
		Ports:        []corev1.ContainerPort{{Name: "serve", ContainerPort: rs.Spec.Port, Protocol: corev1.ProtocolTCP}},
		VolumeMounts: []corev1.VolumeMount{{Name: "serve-config", MountPath: "/etc/ray-serve"}},
	}, pod.Containers)}
	return controllerutil.SetControllerReference(rs, d, r.Scheme)
}

// withContainerDefaults gives the container the operator wants what the
// API server defaulted in the stored container of the same name. The
// operator owns the pod template's containers and replaces them whole, so
// drift is undone; without the defaults the wanted container would differ
// from the stored one at every reconcile, and CreateOrUpdate would send an
// update that changes nothing.
func withContainerDefaults(want corev1.Container, stored []corev1.Container) corev1.Container {
	for _, c := range stored {
		if c.Name != want.Name {
			continue
		}
		want.TerminationMessagePath = c.TerminationMessagePath
		want.TerminationMessagePolicy = c.TerminationMessagePolicy
		// The default pull policy follows the image's tag: kept only for
		// the same image.
		if c.Image == want.Image {
			want.ImagePullPolicy = c.ImagePullPolicy
		}
	}
	return want
}

// withVolumeDefaults gives the ConfigMap volume the operator wants the
// file mode the API server defaulted in the stored volume of the same name
// (see withContainerDefaults).
func withVolumeDefaults(want corev1.Volume, stored []corev1.Volume) corev1.Volume {
	for _, v := range stored {
		if v.Name == want.Name && v.ConfigMap != nil && want.ConfigMap != nil && v.ConfigMap.Name == want.ConfigMap.Name {
			want.ConfigMap.DefaultMode = v.ConfigMap.DefaultMode
		}
	}
	return want
}

func (r *RayServeReconciler) reconcileService(ctx context.Context, rs *servingv1alpha1.RayServe) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: rs.Name, Namespace: rs.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error { return r.mutateService(svc, rs) })
	if err != nil {
		return fmt.Errorf("service %s: %w", svc.Name, err)
	}
	return nil
}

// mutateService makes svc (as stored, or new) the Service rs wants.
func (r *RayServeReconciler) mutateService(svc *corev1.Service, rs *servingv1alpha1.RayServe) error {
	svc.Labels = labelsFor(rs)
	svc.Spec.Selector = labelsFor(rs)
	svc.Spec.Type = rs.Spec.ServiceType
	port := corev1.ServicePort{Name: "serve", Port: rs.Spec.Port, TargetPort: intstr.FromString("serve"), Protocol: corev1.ProtocolTCP}
	// Keep the NodePort the API server allocated: clearing it would
	// ask for a new one on every update.
	if len(svc.Spec.Ports) == 1 && svc.Spec.Type != corev1.ServiceTypeClusterIP {
		port.NodePort = svc.Spec.Ports[0].NodePort
	}
	svc.Spec.Ports = []corev1.ServicePort{port}
	return controllerutil.SetControllerReference(rs, svc, r.Scheme)
}

// updateStatus records the outcome of a reconcile: Reconciled says whether
// the children match the spec, Available whether the Deployment has the
// replicas it wants.
func (r *RayServeReconciler) updateStatus(ctx context.Context, rs *servingv1alpha1.RayServe, hash string, d *appsv1.Deployment, reconcileErr error) error {
	status := rs.Status.DeepCopy()
	status.ObservedGeneration = rs.Generation
	reconciled := metav1.Condition{Type: servingv1alpha1.ConditionReconciled, Status: metav1.ConditionTrue,
		Reason: "ChildrenUpToDate", Message: "Deployment, Service and ConfigMap match the spec", ObservedGeneration: rs.Generation}
	if reconcileErr != nil {
		reconciled.Status, reconciled.Reason, reconciled.Message = metav1.ConditionFalse, "ReconcileFailed", reconcileErr.Error()
	}
	meta.SetStatusCondition(&status.Conditions, reconciled)
	if d != nil {
		status.ConfigHash, status.ServiceName = hash, rs.Name
		status.AvailableReplicas = d.Status.AvailableReplicas
		meta.SetStatusCondition(&status.Conditions, availableCondition(rs, d))
	}
	if equalStatus(&rs.Status, status) {
		return nil
	}
	rs.Status = *status
	return r.Status().Update(ctx, rs)
}

func availableCondition(rs *servingv1alpha1.RayServe, d *appsv1.Deployment) metav1.Condition {
	want := desiredReplicas(rs)
	c := metav1.Condition{Type: servingv1alpha1.ConditionAvailable, ObservedGeneration: rs.Generation}
	switch {
	case rs.Spec.Suspend:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Suspended", "spec.suspend is set"
	case d.Status.AvailableReplicas >= want && d.Status.ObservedGeneration >= d.Generation:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "ReplicasAvailable", fmt.Sprintf("%d of %d replicas available", d.Status.AvailableReplicas, want)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "ReplicasUnavailable", fmt.Sprintf("%d of %d replicas available", d.Status.AvailableReplicas, want)
	}
	return c
}

// equalStatus ignores condition transition times, which SetStatusCondition
// keeps unless the status changes.
func equalStatus(a, b *servingv1alpha1.RayServeStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.AvailableReplicas != b.AvailableReplicas ||
		a.ServiceName != b.ServiceName || a.ConfigHash != b.ConfigHash || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for _, c := range b.Conditions {
		old := meta.FindStatusCondition(a.Conditions, c.Type)
		if old == nil || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message || old.ObservedGeneration != c.ObservedGeneration {
			return false
		}
	}
	return true
}

// SetupWithManager registers the controller: RayServes, and the children
// they own, so a child changed or deleted by someone else is put back.
func (r *RayServeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&servingv1alpha1.RayServe{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Named("rayserve").
		Complete(r)
}
