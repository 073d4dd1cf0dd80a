package apiserver

import (
	"github.com/sirupsen/logrus"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/simulation"
	"kplane.dev/kplane/planes/simulation/kubelet"
	"kplane.dev/kplane/planes/simulation/nodes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// newSimulation builds the workload simulation of every plane, or nil
// when it is off (planes are an API only) or the profile serves no
// workloads to simulate.
func newSimulation(profile Profile, options *simulation.Options, loopbackConfig *rest.Config, storage *planestorage.Registry) (*simulation.Simulation, error) {
	if options == nil || profile.Generic() {
		return nil, nil
	}
	return simulation.New(simulation.Config{Options: *options, Loopback: loopbackConfig, Storage: storage})
}

// planeNodeSpec reads the node shape of a Plane from the manager's
// informer.
func planeNodeSpec(obj any) *nodes.Spec {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	if _, found, _ := unstructured.NestedMap(u.Object, "spec", "simulation", "nodes"); !found {
		return nil
	}
	plane, err := lifecycle.PlaneFrom(u)
	if err != nil {
		return nil
	}
	return plane.NodeSpec()
}

// planeSettings reads what a Plane from the manager's informer sets for
// the kubelet; a Plane without spec.simulation costs no conversion.
func planeSettings(obj any) kubelet.PlaneSettings {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return kubelet.PlaneSettings{}
	}
	if _, found, _ := unstructured.NestedMap(u.Object, "spec", "simulation"); !found {
		return kubelet.PlaneSettings{}
	}
	plane, err := lifecycle.PlaneFrom(u)
	if err != nil || plane.Spec.Simulation == nil {
		return kubelet.PlaneSettings{}
	}
	settings := kubelet.PlaneSettings{Faults: plane.Spec.Simulation.Faults}
	if d := plane.Spec.Simulation.RunDuration; d != nil {
		settings.RunDuration = d.Duration
	}
	if d := plane.Spec.Simulation.ReadyDelay; d != nil {
		settings.ReadyDelay = d.Duration
	}
	return settings
}

// withSimulation adds sim to the lifecycle's forgetters when it runs.
func withSimulation(forget []lifecycle.Forgetter, sim *simulation.Simulation) []lifecycle.Forgetter {
	if sim == nil {
		return forget
	}
	return append(forget, sim)
}

// bindSimulation makes the simulation read what each plane's Plane sets
// (whether it runs, node shapes, faults) from the manager.
func bindSimulation(sim *simulation.Simulation, manager *lifecycle.Manager) {
	if sim == nil {
		return
	}
	sim.SetTemplates(manager)
	manager.OnInheritanceChange(sim.InheritanceChanged)
	manager.OnReset(sim.AwaitRevisions)
	sim.SetOff(func(plane string) bool {
		obj, exists := manager.Object(plane)
		// Looked up in place: asked for every plane a look at inherited
		// objects covers, and a Plane carries many annotations.
		return exists && planes.AnnotationOf(obj, simulation.PlaneAnnotation) == "false"
	})
	sim.SetPlaneSettings(func(plane string) kubelet.PlaneSettings {
		obj, exists := manager.Object(plane)
		if !exists {
			return kubelet.PlaneSettings{}
		}
		return planeSettings(obj)
	})
	sim.SetNodeSpecs(func(plane string) *nodes.Spec {
		obj, exists := manager.Object(plane)
		if !exists {
			return nil
		}
		return planeNodeSpec(obj)
	})
	if _, err := manager.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			if !apiequality.Semantic.DeepEqual(planeSettings(old), planeSettings(cur)) {
				if accessor, err := meta.Accessor(cur); err == nil {
					sim.PlaneChanged(accessor.GetName())
				}
			}
		},
	}); err != nil {
		logrus.WithError(err).Error("faults of the simulation will not follow Plane changes")
	}
}
