package server

import "github.com/urfave/cli/v2"

// Flags are the flags of `kplane server`, bound to o: each has a KPLANE_*
// environment variable and defaults to o's value.
func (o *Options) Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "data-dir", Value: o.DataDir, Destination: &o.DataDir, EnvVars: []string{"KPLANE_DATA_DIR"},
			Usage: "directory for the datastore, credentials and kubeconfigs"},
		&cli.StringFlag{Name: "bind-address", Value: o.BindAddress, Destination: &o.BindAddress, EnvVars: []string{"KPLANE_BIND_ADDRESS"},
			Usage: "address the apiserver listens on"},
		&cli.IntFlag{Name: "https-port", Value: o.HTTPSPort, Destination: &o.HTTPSPort, EnvVars: []string{"KPLANE_HTTPS_PORT"},
			Usage: "port the apiserver listens on"},
		&cli.StringSliceFlag{Name: "tls-san", EnvVars: []string{"KPLANE_TLS_SAN"}, Action: o.setTLSSANs,
			Usage: "extra host name or IP for the serving certificate (repeatable)"},
		&cli.StringFlag{Name: "token-file", Destination: &o.TokenFile, EnvVars: []string{"KPLANE_TOKEN_FILE"},
			Usage: "static token file (token,user,uid,\"groups\"); default <data-dir>/tokens.csv, generated with an admin token on first start"},
		&cli.StringFlag{Name: "admin-token", Destination: &o.AdminToken, EnvVars: []string{"KPLANE_ADMIN_TOKEN", "KPLANE_TOKEN"},
			Usage: "admin token of a new token file instead of a generated one (at least 32 characters; e.g. a CI secret)"},
		&cli.StringFlag{Name: "join-token", Aliases: []string{"token"}, Destination: &o.JoinToken, EnvVars: []string{"KPLANE_JOIN_TOKEN"},
			Usage: "secret shared by the servers of one datastore: the first stores the CA, signing key and tokens in it, sealed with it; later ones fetch them (at least 16 characters; external etcd, PostgreSQL, MySQL or an embedded etcd cluster)"},
		&cli.BoolFlag{Name: "cluster-init", Destination: &o.ClusterInit, EnvVars: []string{"KPLANE_CLUSTER_INIT"},
			Usage: "with --datastore-endpoint etcd and a --join-token: make the embedded etcd the first member of a cluster that other servers join with --server"},
		&cli.StringFlag{Name: "server", Destination: &o.JoinServer, EnvVars: []string{"KPLANE_SERVER"},
			Usage: "with --datastore-endpoint etcd and a --join-token: join the embedded etcd cluster of the server at this https://host:port"},
		&cli.StringFlag{Name: "etcd-advertise-address", Destination: &o.EtcdAdvertiseAddress, EnvVars: []string{"KPLANE_ETCD_ADVERTISE_ADDRESS"},
			Usage: "address the other servers of an embedded etcd cluster reach this one's etcd peer port at (default: --bind-address)"},
		&cli.IntFlag{Name: "etcd-peer-port", Value: o.EtcdPeerPort, Destination: &o.EtcdPeerPort, EnvVars: []string{"KPLANE_ETCD_PEER_PORT"},
			Usage: "port the embedded etcd of a cluster listens on for its peers (mutual TLS from the kplane CA)"},
		&cli.StringFlag{Name: "join-token-file", Destination: &o.JoinTokenFile, EnvVars: []string{"KPLANE_JOIN_TOKEN_FILE"},
			Usage: "file holding the join token (instead of --join-token)"},
		&cli.StringFlag{Name: "datastore-endpoint", Destination: &o.DatastoreEndpoint, EnvVars: []string{"KPLANE_DATASTORE_ENDPOINT"},
			Usage: "\"\" (SQLite in the data dir), \"etcd\" (embedded), http(s)://host:2379[,…] (external etcd), postgres://…, mysql://…"},
		&cli.StringFlag{Name: "datastore-cafile", Destination: &o.DatastoreCAFile, EnvVars: []string{"KPLANE_DATASTORE_CAFILE"},
			Usage: "CA bundle to verify an external datastore"},
		&cli.StringFlag{Name: "datastore-certfile", Destination: &o.DatastoreCertFile, EnvVars: []string{"KPLANE_DATASTORE_CERTFILE"},
			Usage: "client certificate for an external datastore"},
		&cli.StringFlag{Name: "datastore-keyfile", Destination: &o.DatastoreKeyFile, EnvVars: []string{"KPLANE_DATASTORE_KEYFILE"},
			Usage: "client key for an external datastore"},
		&cli.DurationFlag{Name: "etcd-compaction-interval", Value: o.CompactionInterval, Destination: &o.CompactionInterval, EnvVars: []string{"KPLANE_ETCD_COMPACTION_INTERVAL"},
			Usage: "how often the datastore's history older than one interval is compacted (a list continue token expires after one to two intervals; 0: never)"},
		&cli.StringFlag{Name: "service-cidr", Value: o.ServiceCIDR, Destination: &o.ServiceCIDR, EnvVars: []string{"KPLANE_SERVICE_CIDR"},
			Usage: "range every plane allocates Service ClusterIPs from"},
		&cli.StringFlag{Name: "service-node-port-range", Value: o.NodePortRange, Destination: &o.NodePortRange, EnvVars: []string{"KPLANE_SERVICE_NODE_PORT_RANGE"},
			Usage: "range every plane allocates NodePorts from"},
		&cli.DurationFlag{Name: "service-repair-interval", Value: o.ServiceRepairInterval, Destination: &o.ServiceRepairInterval, EnvVars: []string{"KPLANE_SERVICE_REPAIR_INTERVAL"},
			Usage: "how often every plane's ClusterIP and NodePort allocations are checked against its Services: an address no Service holds is freed after three checks in a row (0: never)"},
		&cli.StringFlag{Name: "log-level", Value: o.LogLevel, Destination: &o.LogLevel, EnvVars: []string{"KPLANE_LOG_LEVEL"},
			Usage: "debug, info, warn or error"},
		&cli.IntFlag{Name: "max-planes", Destination: &o.MaxPlanes, EnvVars: []string{"KPLANE_MAX_PLANES"},
			Usage: "the most planes the server holds (0: no limit)"},
		&cli.IntFlag{Name: "max-planes-per-user", Destination: &o.MaxPlanesPerUser, EnvVars: []string{"KPLANE_MAX_PLANES_PER_USER"},
			Usage: "the most planes one identity brings into being by first requests; past it 403 (0: no limit)"},
		&cli.BoolFlag{Name: "plane-fairness", Value: o.PlaneFairness, Destination: &o.PlaneFairness, EnvVars: []string{"KPLANE_PLANE_FAIRNESS"},
			Usage: "queue requests fairly by plane (upstream APF fair queuing, the plane as the flow): one busy plane waits in its own queues, not in everyone's"},
		&cli.IntFlag{Name: "plane-fairness-cpus", Value: o.PlaneFairnessCPUs, Destination: &o.PlaneFairnessCPUs, EnvVars: []string{"KPLANE_PLANE_FAIRNESS_CPUS"},
			Usage: "share this many CPUs among the active planes: each executes at most max(1, N / active planes) requests while others are active (default: the CPUs Go may use; 0: off)"},
		&cli.IntFlag{Name: "plane-fairness-seats", Destination: &o.PlaneFairnessSeats, EnvVars: []string{"KPLANE_PLANE_FAIRNESS_SEATS"},
			Usage: "requests of all planes executing at once under --plane-fairness (0: 32 per CPU); watches take none"},
		&cli.Int64Flag{Name: "plane-max-objects", Destination: &o.PlaneMaxObjects, EnvVars: []string{"KPLANE_PLANE_MAX_OBJECTS"},
			Usage: "records a plane may store unless its Plane's spec.limits says otherwise; past it 403 exceeded quota (0: no limit)"},
		&cli.Int64Flag{Name: "plane-max-bytes", Destination: &o.PlaneMaxBytes, EnvVars: []string{"KPLANE_PLANE_MAX_BYTES"},
			Usage: "encoded bytes a plane's records may take unless its Plane says otherwise; past it 403 exceeded quota (0: no limit)"},
		&cli.IntFlag{Name: "plane-requests-per-second", Destination: &o.PlaneRequestsPerSecond, EnvVars: []string{"KPLANE_PLANE_REQUESTS_PER_SECOND"},
			Usage: "requests per second a plane may make unless its Plane says otherwise; past it 429 with Retry-After (0: no limit)"},
		&cli.IntFlag{Name: "plane-request-burst", Destination: &o.PlaneRequestBurst, EnvVars: []string{"KPLANE_PLANE_REQUEST_BURST"},
			Usage: "requests a plane may make at once above its rate (default: the rate)"},
		&cli.IntFlag{Name: "plane-max-watches", Destination: &o.PlaneMaxWatches, EnvVars: []string{"KPLANE_PLANE_MAX_WATCHES"},
			Usage: "watches open at once in a plane unless its Plane says otherwise; past it 403 exceeded quota (0: no limit)"},
		&cli.StringFlag{Name: "plane-bootstrap", Value: o.PlaneBootstrap, Destination: &o.PlaneBootstrap, EnvVars: []string{"KPLANE_PLANE_BOOTSTRAP"},
			Usage: "RBAC a new plane starts with: minimal (cluster-admin, admin, edit, view, discovery roles) or full (the upstream bootstrap policy)"},
		&cli.BoolFlag{Name: "plane-base", Value: o.PlaneBase, Destination: &o.PlaneBase, EnvVars: []string{"KPLANE_PLANE_BASE"},
			Usage: "a new plane made from nothing stands on a base plane of the bootstrap objects, written once, and stores only what it changes (false: every new plane writes its own copy)"},
		&cli.StringFlag{Name: "profile", Value: o.Profile, Destination: &o.Profile, EnvVars: []string{"KPLANE_PROFILE"},
			Usage: "API surface of every plane: full (kube-apiserver's) or generic (KEP-4080: namespaces, configmaps, secrets, service accounts, events, quotas, RBAC, CRDs, admission policies and webhooks, leases, certificates, flow control; no pods, nodes, workloads or services, no simulation)"},
		&cli.BoolFlag{Name: "enable-profiling", Destination: &o.EnableProfiling, EnvVars: []string{"KPLANE_ENABLE_PROFILING"},
			Usage: "serve /debug/pprof on the root plane (admin credentials only)"},
		&cli.StringFlag{Name: "server-name", Destination: &o.ServerName, EnvVars: []string{"KPLANE_SERVER_NAME"},
			Usage: "this server's name among those sharing a datastore, the holder named on the controllers' Leases (default <host name>:<https port>)"},
		&cli.BoolFlag{Name: "disable-controllers", Destination: &o.DisableControllers, EnvVars: []string{"KPLANE_DISABLE_CONTROLLERS"},
			Usage: "run no generic controllers (namespace deletion, garbage collection, default service accounts, ClusterRole aggregation): planes are API and storage only; with several servers on one datastore, this one never takes them over"},
		&cli.BoolFlag{Name: "simulation", Value: o.Simulation, Destination: &o.Simulation, EnvVars: []string{"KPLANE_SIMULATION"},
			Usage: "run workloads in every plane: upstream deployment, replicaset, job, cronjob, ttl-after-finished and endpointslice controllers, simulated nodes, scheduler and kubelet (false: planes are an API only and pods never run)"},
		&cli.IntFlag{Name: "simulation-nodes", Value: o.SimulationNodes, Destination: &o.SimulationNodes, EnvVars: []string{"KPLANE_SIMULATION_NODES"},
			Usage: "simulated nodes each plane gets when its first pod needs one"},
		&cli.StringFlag{Name: "simulation-node-cpu", Value: o.SimulationNodeCPU, Destination: &o.SimulationNodeCPU, EnvVars: []string{"KPLANE_SIMULATION_NODE_CPU"},
			Usage: "allocatable cpu of each simulated node"},
		&cli.StringFlag{Name: "simulation-node-memory", Value: o.SimulationNodeMemory, Destination: &o.SimulationNodeMemory, EnvVars: []string{"KPLANE_SIMULATION_NODE_MEMORY"},
			Usage: "allocatable memory of each simulated node"},
		&cli.IntFlag{Name: "simulation-node-pods", Value: o.SimulationNodePods, Destination: &o.SimulationNodePods, EnvVars: []string{"KPLANE_SIMULATION_NODE_PODS"},
			Usage: "pods each simulated node holds"},
		&cli.DurationFlag{Name: "simulation-run-duration", Value: o.SimulationRunDuration, Destination: &o.SimulationRunDuration, EnvVars: []string{"KPLANE_SIMULATION_RUN_DURATION"},
			Usage: "how long a run-to-completion pod (restartPolicy Never or OnFailure) runs before it succeeds; a pod's kplane.dev/run-duration annotation overrides it"},
		&cli.DurationFlag{Name: "simulation-ready-delay", Value: o.SimulationReadyDelay, Destination: &o.SimulationReadyDelay, EnvVars: []string{"KPLANE_SIMULATION_READY_DELAY"},
			Usage: "how long a pod runs before its containers are ready (0: at once); a plane's spec.simulation.readyDelay and a pod's kplane.dev/ready-delay annotation override it"},
		&cli.IntFlag{Name: "v", Value: o.Verbosity, Destination: &o.Verbosity, EnvVars: []string{"KPLANE_V"},
			Usage: "verbosity of the Kubernetes components' logs (klog -v)"},
		&cli.StringFlag{Name: "log-format", Value: o.LogFormat, Destination: &o.LogFormat, EnvVars: []string{"KPLANE_LOG_FORMAT"},
			Usage: "text or json (every line, the Kubernetes components' included)"},
		&cli.StringFlag{Name: "manifests-dir", Destination: &o.ManifestsDir, EnvVars: []string{"KPLANE_MANIFESTS_DIR"},
			Usage: "directory of manifests applied at start and on change; default <data-dir>/manifests"},
		&cli.IntFlag{Name: "metrics-top-planes", Value: o.MetricsTopPlanes, Destination: &o.MetricsTopPlanes, EnvVars: []string{"KPLANE_METRICS_TOP_PLANES"},
			Usage: "how many of the busiest planes get a request series of their own on /metrics"},
		&cli.DurationFlag{Name: "metrics-window", Value: o.MetricsWindow, Destination: &o.MetricsWindow, EnvVars: []string{"KPLANE_METRICS_WINDOW"},
			Usage: "period over which planes are ranked for /metrics"},
		&cli.IntFlag{Name: "snapshot-max-streams-per-user", Value: o.SnapshotMaxStreamsPerUser, Destination: &o.SnapshotMaxStreamsPerUser, EnvVars: []string{"KPLANE_SNAPSHOT_MAX_STREAMS_PER_USER"},
			Usage: "the most snapshot delta streams one user of a plane holds open at once; past it 429 (0: no limit)"},
		&cli.IntFlag{Name: "snapshot-max-streams", Value: o.SnapshotMaxStreams, Destination: &o.SnapshotMaxStreams, EnvVars: []string{"KPLANE_SNAPSHOT_MAX_STREAMS"},
			Usage: "the most snapshot delta streams the server holds open at once; past it 429 (0: no limit)"},
		&cli.DurationFlag{Name: "snapshot-max-stream-timeout", Value: o.SnapshotMaxStreamTimeout, Destination: &o.SnapshotMaxStreamTimeout, EnvVars: []string{"KPLANE_SNAPSHOT_MAX_STREAM_TIMEOUT"},
			Usage: "longest a snapshot delta stream runs; a stream's timeoutSeconds can only shorten it"},
		&cli.IntFlag{Name: "audit-buffer-events", Value: o.AuditBufferEvents, Destination: &o.AuditBufferEvents, EnvVars: []string{"KPLANE_AUDIT_BUFFER_EVENTS"},
			Usage: "how many audit events each plane's trail keeps in memory (GET /audit); 0: no audit at all"},
		&cli.StringFlag{Name: "audit-dir", Destination: &o.AuditDir, EnvVars: []string{"KPLANE_AUDIT_DIR"},
			Usage: "directory of a JSON-lines audit log per plane (<dir>/<plane>/audit.jsonl), read back after a restart; empty: memory only"},
		&cli.IntFlag{Name: "audit-max-file-size", Value: o.AuditMaxFileSize, Destination: &o.AuditMaxFileSize, EnvVars: []string{"KPLANE_AUDIT_MAX_FILE_SIZE"},
			Usage: "MiB at which a plane's audit log is rotated (one rotated file is kept)"},
		&cli.StringFlag{Name: "audit-level", Value: o.AuditLevel, Destination: &o.AuditLevel, EnvVars: []string{"KPLANE_AUDIT_LEVEL"},
			Usage: "audit level of planes whose Plane sets no spec.audit.level, root included: None, Metadata, Request or RequestResponse"},
		&cli.StringSliceFlag{Name: "webhook-egress-allow-cidrs", EnvVars: []string{"KPLANE_WEBHOOK_EGRESS_ALLOW_CIDRS"}, Action: o.setWebhookEgressAllow,
			Usage: "CIDRs (comma-separated or repeated) that planes' admission webhooks may be called at; empty: every address but the denied ones"},
		&cli.StringSliceFlag{Name: "webhook-egress-deny-cidrs", EnvVars: []string{"KPLANE_WEBHOOK_EGRESS_DENY_CIDRS"}, Action: o.setWebhookEgressDeny,
			Usage: "CIDRs planes' admission webhooks may not be called at, on top of link-local, cloud metadata and the datastore (always refused)"},
		&cli.IntFlag{Name: "webhook-max-in-flight-per-plane", Value: o.WebhookMaxInFlightPerPlane, Destination: &o.WebhookMaxInFlightPerPlane, EnvVars: []string{"KPLANE_WEBHOOK_MAX_IN_FLIGHT_PER_PLANE"},
			Usage: "the most admission webhook calls of one plane in flight at once; past it a call fails at once (0: no bound)"},
	}
}

// setTLSSANs takes the repeatable --tls-san (a flag slice has no
// destination of a plain type).
func (o *Options) setTLSSANs(_ *cli.Context, sans []string) error {
	o.TLSSANs = sans
	return nil
}

// setWebhookEgressAllow takes the repeatable --webhook-egress-allow-cidrs.
func (o *Options) setWebhookEgressAllow(_ *cli.Context, cidrs []string) error {
	o.WebhookEgressAllowCIDRs = cidrs
	return nil
}

// setWebhookEgressDeny takes the repeatable --webhook-egress-deny-cidrs.
func (o *Options) setWebhookEgressDeny(_ *cli.Context, cidrs []string) error {
	o.WebhookEgressDenyCIDRs = cidrs
	return nil
}
