package informers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"kplane.dev/kplane/planes/simulation/planens"
)

const (
	// PlaneIndex indexes objects by their plane.
	PlaneIndex = "kplane.dev/plane"
	// NodeIndex indexes pods by their (folded) node name.
	NodeIndex = "kplane.dev/node"
)

// AddPlaneIndex indexes inf's objects by plane (from the folded namespace,
// or the folded name of a cluster-scoped object).
func AddPlaneIndex(inf cache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[PlaneIndex]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{PlaneIndex: func(obj any) ([]string, error) {
		accessor, err := meta.Accessor(obj)
		if err != nil {
			return nil, nil
		}
		folded := accessor.GetNamespace()
		if folded == "" {
			folded = accessor.GetName()
		}
		if plane := planens.Plane(folded); plane != "" {
			return []string{plane}, nil
		}
		return nil, nil
	}})
}

// AddNodeIndex indexes a pod informer's pods by node.
func AddNodeIndex(inf cache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[NodeIndex]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{NodeIndex: func(obj any) ([]string, error) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
			return []string{pod.Spec.NodeName}, nil
		}
		return nil, nil
	}})
}
