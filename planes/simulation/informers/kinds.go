package informers

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/controller/endpoint"

	"kplane.dev/kplane/planes/simulation/planens"
)

// foldNamespace is the fold of every namespaced object.
func foldNamespace(plane string, obj runtime.Object) {
	if accessor, err := meta.Accessor(obj); err == nil {
		accessor.SetNamespace(planens.Join(plane, accessor.GetNamespace()))
	}
}

var (
	deployments = kind{
		object: func() runtime.Object { return &appsv1.Deployment{} },
		list:   func() runtime.Object { return &appsv1.DeploymentList{} },
		fold:   foldNamespace,
	}
	replicaSets = kind{
		object: func() runtime.Object { return &appsv1.ReplicaSet{} },
		list:   func() runtime.Object { return &appsv1.ReplicaSetList{} },
		fold:   foldNamespace,
	}
	replicationControllers = kind{
		object: func() runtime.Object { return &corev1.ReplicationController{} },
		list:   func() runtime.Object { return &corev1.ReplicationControllerList{} },
		fold:   foldNamespace,
	}
	statefulSets = kind{
		object: func() runtime.Object { return &appsv1.StatefulSet{} },
		list:   func() runtime.Object { return &appsv1.StatefulSetList{} },
		fold:   foldNamespace,
	}
	controllerRevisions = kind{
		object: func() runtime.Object { return &appsv1.ControllerRevision{} },
		list:   func() runtime.Object { return &appsv1.ControllerRevisionList{} },
		fold:   foldNamespace,
	}
	persistentVolumeClaims = kind{
		object: func() runtime.Object { return &corev1.PersistentVolumeClaim{} },
		list:   func() runtime.Object { return &corev1.PersistentVolumeClaimList{} },
		fold:   foldNamespace,
	}
	// endpoints: only those the upstream controller manages. It deletes
	// the Endpoints of every Service its lister lacks, and the service
	// informer holds only Services with a selector: Endpoints written by
	// hand for a selector-less Service must never reach it.
	endpoints = kind{
		object: func() runtime.Object { return &corev1.Endpoints{} },
		list:   func() runtime.Object { return &corev1.EndpointsList{} },
		fold:   foldNamespace,
		keep: func(obj runtime.Object) bool {
			return obj.(*corev1.Endpoints).Labels[endpoint.LabelManagedBy] == endpoint.ControllerName
		},
	}
	podDisruptionBudgets = kind{
		object: func() runtime.Object { return &policyv1.PodDisruptionBudget{} },
		list:   func() runtime.Object { return &policyv1.PodDisruptionBudgetList{} },
		fold:   foldNamespace,
	}
	jobs = kind{
		object: func() runtime.Object { return &batchv1.Job{} },
		list:   func() runtime.Object { return &batchv1.JobList{} },
		fold:   foldNamespace,
	}
	cronJobs = kind{
		object: func() runtime.Object { return &batchv1.CronJob{} },
		list:   func() runtime.Object { return &batchv1.CronJobList{} },
		fold:   foldNamespace,
	}
	pods = kind{
		object: func() runtime.Object { return &corev1.Pod{} },
		list:   func() runtime.Object { return &corev1.PodList{} },
		fold:   foldPod,
	}
	// daemonPods are pods for the DaemonSet controller, which finds a
	// pending Pod's node in its node affinity: the names there are folded
	// too. (The scheduler matches the affinity against the node's name as
	// the plane knows it.)
	daemonPods = kind{
		object: pods.object,
		list:   pods.list,
		fold: func(plane string, obj runtime.Object) {
			foldPod(plane, obj)
			foldNodeNames(plane, obj.(*corev1.Pod))
		},
	}
	daemonSets = kind{
		object: func() runtime.Object { return &appsv1.DaemonSet{} },
		list:   func() runtime.Object { return &appsv1.DaemonSetList{} },
		fold:   foldNamespace,
	}
	// services: only those with a selector have endpoints to keep (every
	// plane's default/kubernetes has none, so an idle plane adds nothing).
	services = kind{
		object: func() runtime.Object { return &corev1.Service{} },
		list:   func() runtime.Object { return &corev1.ServiceList{} },
		fold:   foldNamespace,
		keep:   func(obj runtime.Object) bool { return obj.(*corev1.Service).Spec.Selector != nil },
	}
	// endpointSlices: only those the upstream controller manages.
	endpointSlices = kind{
		object: func() runtime.Object { return &discoveryv1.EndpointSlice{} },
		list:   func() runtime.Object { return &discoveryv1.EndpointSliceList{} },
		fold: func(plane string, obj runtime.Object) {
			slice := obj.(*discoveryv1.EndpointSlice)
			slice.Namespace = planens.Join(plane, slice.Namespace)
			// The endpoints are shared with the cache: fold a copy.
			endpoints := make([]discoveryv1.Endpoint, len(slice.Endpoints))
			for i, e := range slice.Endpoints {
				if e.NodeName != nil {
					name := planens.Join(plane, *e.NodeName)
					e.NodeName = &name
				}
				if e.TargetRef != nil {
					ref := *e.TargetRef
					if ref.Namespace != "" {
						ref.Namespace = planens.Join(plane, ref.Namespace)
					}
					e.TargetRef = &ref
				}
				endpoints[i] = e
			}
			slice.Endpoints = endpoints
		},
		keep: func(obj runtime.Object) bool {
			return obj.(*discoveryv1.EndpointSlice).Labels[discoveryv1.LabelManagedBy] == EndpointSliceManager
		},
	}
	// nodes are cluster-scoped: the plane is folded into the name.
	nodes = kind{
		object: func() runtime.Object { return &corev1.Node{} },
		list:   func() runtime.Object { return &corev1.NodeList{} },
		fold: func(plane string, obj runtime.Object) {
			node := obj.(*corev1.Node)
			node.Name = planens.Join(plane, node.Name)
		},
	}
)

func foldPod(plane string, obj runtime.Object) {
	pod := obj.(*corev1.Pod)
	pod.Namespace = planens.Join(plane, pod.Namespace)
	if pod.Spec.NodeName != "" {
		pod.Spec.NodeName = planens.Join(plane, pod.Spec.NodeName)
	}
}

// foldNodeNames folds plane into the node names a pod's required node
// affinity names (a DaemonSet's pod is bound to its node that way), so
// that they match the folded nodes. The affinity is the cache's: a copy
// is folded.
func foldNodeNames(plane string, pod *corev1.Pod) {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return
	}
	named := false
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, field := range term.MatchFields {
			named = named || field.Key == metav1.ObjectNameField
		}
	}
	if !named {
		return
	}
	a = a.DeepCopy()
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for i, field := range term.MatchFields {
			if field.Key != metav1.ObjectNameField {
				continue
			}
			for j, name := range field.Values {
				term.MatchFields[i].Values[j] = planens.Join(plane, name)
			}
		}
	}
	pod.Spec.Affinity = a
}

// EndpointSliceManager is the managed-by label value of upstream's
// EndpointSlice controller.
const EndpointSliceManager = "endpointslice-controller.k8s.io"
