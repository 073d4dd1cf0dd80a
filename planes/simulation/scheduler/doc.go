// Package scheduler binds the pods of every plane to the plane's simulated
// nodes: one queue and one worker for all planes, fed by the shared pod
// and node informers. A pod fits a node that is Ready and schedulable,
// whose taints it tolerates (NoSchedule, NoExecute), whose labels match its
// nodeSelector and required node affinity (k8s.io/component-helpers), and
// whose allocatable cpu, memory, pods and extended resources cover its
// requests next to the pods already there; among those it goes to the one
// with the fewest pods. A pod that fits nowhere stays Pending with
// PodScheduled=False/Unschedulable and a FailedScheduling event, and is
// tried again when a node of its plane changes or a pod of it goes away. A
// plane's first pod brings its nodes into being (nodes.Provisioner).
package scheduler
