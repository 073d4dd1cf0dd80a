// Package kubelet is the simulated kubelet of every simulated node of every
// plane: one queue and a few workers for all of them, fed by the shared pod
// informer. A pod bound to a simulated node is started at once: Running,
// with a pod IP from its node's pod CIDR, its containers running, started
// and ready, its init containers completed and its Ready condition true. A
// run-to-completion pod (restartPolicy Never or OnFailure) then succeeds
// after its run duration (Config.RunDuration, or the pod's
// kplane.dev/run-duration annotation) through the same queue's delay, so
// no timer is kept per pod either. A pod being deleted gracefully is
// deleted at once, as a kubelet whose containers stopped would. Nothing is
// executed anywhere: the state is only written to the API.
package kubelet
