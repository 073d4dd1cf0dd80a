// Package fairness shares the server's request seats fairly among planes:
// upstream API Priority and Fairness's fair queuing (a QueueSet of
// k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset) with the
// plane as the flow, so that one plane saturating the server waits in its
// own queues while every other plane's requests are dispatched in turn.
// It stands where upstream's APF filter would: upstream's configuration
// (FlowSchemas and PriorityLevelConfigurations read through informers of
// one cluster) distinguishes flows by user or namespace only, and every
// plane serves its own FlowSchemas, which must not steer the server.
package fairness
