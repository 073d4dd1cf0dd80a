// Package simulation is the cluster behind every plane: upstream workload
// controllers (deployment, replicaset, job, cronjob, ttl-after-finished,
// endpointslice from k8s.io/kubernetes/pkg/controller), simulated nodes, a
// small scheduler and a simulated kubelet, one instance of each for all
// planes.
//
// The upstream controllers run unmodified. They take client-go informers
// and a clientset; here the informers are fed by the shared watch caches
// (informers) and show every plane's objects with the plane folded into
// the namespace (`<plane>|<ns>`, planens), and the clientset unfolds it
// into the request's plane (planeclient). So a controller keys, lists and
// writes per plane without knowing planes exist, and an idle plane costs
// nothing: no informer, goroutine, queue entry or timer of its own (its
// only objects the informers would hold, the Service default/kubernetes
// without selector, are left out).
package simulation
