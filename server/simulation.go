package server

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	"kplane.dev/kplane/planes/simulation"
	"kplane.dev/kplane/planes/simulation/nodes"
	"kplane.dev/kplane/server/version"
)

// simulationOptions turns the --simulation* flags into the simulation's
// options; nil when the simulation is off.
func (o *Options) simulationOptions() (*simulation.Options, error) {
	if !o.Simulation {
		return nil, nil
	}
	cpu, err := resource.ParseQuantity(o.SimulationNodeCPU)
	if err != nil || cpu.Sign() <= 0 {
		return nil, fmt.Errorf("--simulation-node-cpu %q: want a positive quantity such as 8 or 500m", o.SimulationNodeCPU)
	}
	memory, err := resource.ParseQuantity(o.SimulationNodeMemory)
	if err != nil || memory.Sign() <= 0 {
		return nil, fmt.Errorf("--simulation-node-memory %q: want a positive quantity such as 32Gi", o.SimulationNodeMemory)
	}
	if o.SimulationNodes < 1 || o.SimulationNodes > nodes.MaxCount {
		return nil, fmt.Errorf("--simulation-nodes %d: want 1 to %d", o.SimulationNodes, nodes.MaxCount)
	}
	if o.SimulationNodePods < 1 {
		return nil, fmt.Errorf("--simulation-node-pods %d: want at least 1", o.SimulationNodePods)
	}
	if o.SimulationRunDuration < 0 {
		return nil, fmt.Errorf("--simulation-run-duration %s: must not be negative", o.SimulationRunDuration)
	}
	if o.SimulationReadyDelay < 0 {
		return nil, fmt.Errorf("--simulation-ready-delay %s: must not be negative", o.SimulationReadyDelay)
	}
	options := simulation.DefaultOptions()
	options.Nodes = nodes.Shape{
		Count: o.SimulationNodes, CPU: cpu, Memory: memory,
		Pods: *resource.NewQuantity(int64(o.SimulationNodePods), resource.DecimalSI), KubeletVersion: version.Kubernetes(),
	}
	options.RunDuration = o.SimulationRunDuration
	options.ReadyDelay = o.SimulationReadyDelay
	return &options, nil
}
