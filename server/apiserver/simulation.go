package apiserver

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/simulation"
	"kplane.dev/kplane/planes/simulation/faults"
	"kplane.dev/kplane/planes/simulation/nodes"
	planestorage "kplane.dev/kplane/planes/storage"
)

// newSimulation builds the workload simulation of every plane, or nil
// when it is off (planes are an API only).
func newSimulation(options *simulation.Options, loopbackConfig *rest.Config, storage *planestorage.Registry) (*simulation.Simulation, error) {
	if options == nil {
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

// planeFaults reads the faults of a Plane from the manager's informer; a
// Plane without any costs no conversion.
func planeFaults(obj any) []faults.Fault {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	if raw, found, _ := unstructured.NestedSlice(u.Object, "spec", "simulation", "faults"); !found || len(raw) == 0 {
		return nil
	}
	plane, err := lifecycle.PlaneFrom(u)
	if err != nil {
		return nil
	}
	return plane.Faults()
}

// withSimulation adds sim to the lifecycle's forgetters when it runs.
func withSimulation(forget []lifecycle.Forgetter, sim *simulation.Simulation) []lifecycle.Forgetter {
	if sim == nil {
		return forget
	}
	return append(forget, sim)
}

// addSimulationHook starts the simulation once every existing plane is
// known: like the controllers, it addresses planes with requests that
// never provision one.
func addSimulationHook(server *genericapiserver.GenericAPIServer, sim *simulation.Simulation, manager *lifecycle.Manager) {
	if sim == nil {
		return
	}
	planesByName := manager.Informer().GetIndexer()
	sim.SetOff(func(plane string) bool {
		obj, exists, err := planesByName.GetByKey(plane)
		if err != nil || !exists {
			return false
		}
		accessor, err := meta.Accessor(obj)
		return err == nil && accessor.GetAnnotations()[simulation.PlaneAnnotation] == "false"
	})
	sim.SetFaults(func(plane string) []faults.Fault {
		obj, exists, err := planesByName.GetByKey(plane)
		if err != nil || !exists {
			return nil
		}
		return planeFaults(obj)
	})
	sim.SetNodeSpecs(func(plane string) *nodes.Spec {
		obj, exists, err := planesByName.GetByKey(plane)
		if err != nil || !exists {
			return nil
		}
		return planeNodeSpec(obj)
	})
	if _, err := manager.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			if !apiequality.Semantic.DeepEqual(planeFaults(old), planeFaults(cur)) {
				if accessor, err := meta.Accessor(cur); err == nil {
					sim.FaultsChanged(accessor.GetName())
				}
			}
		},
	}); err != nil {
		logrus.WithError(err).Error("faults of the simulation will not follow Plane changes")
	}
	server.AddPostStartHookOrDie("kplane-simulation", func(ctx genericapiserver.PostStartHookContext) error {
		go func() {
			if wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
				return manager.HasSynced(), nil
			}) != nil {
				return
			}
			if err := sim.Run(ctx); err != nil {
				logrus.WithError(err).Error("workload simulation stopped")
			}
		}()
		return nil
	})
}
