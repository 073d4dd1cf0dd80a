package storage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	etcdkubernetes "go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"
	"k8s.io/apimachinery/pkg/runtime"
	genericfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/cache"
)

// As upstream's etcd clients of the apiserver.
const (
	datastoreDialTimeout      = 20 * time.Second
	datastoreKeepaliveTime    = 30 * time.Second
	datastoreKeepaliveTimeout = 10 * time.Second
)

// datastoreClients hands every storage of a registry one etcd client (and
// one compactor) per datastore. Upstream gives each resource a client of
// its own: with one process serving ~60 resources from one datastore that
// was ~60 gRPC connections, each with its transports' goroutines and
// buffers on both ends (kine runs in the process), and a watch stream per
// resource where one carries them all. An empty server held about 600
// goroutines and several MiB for them.
type datastoreClients struct {
	mu      sync.Mutex
	clients map[string]*datastoreClient
	// local makes clients of the datastore at localEndpoints, which runs
	// in this process; nil when none does.
	local          func() *clientv3.Client
	localEndpoints []string
	// observed follows what the datastore's answers show (observedkv.go).
	observed observedRevisions
}

type datastoreClient struct {
	client *etcdkubernetes.Client
	// compactor is nil when the apiserver does not compact.
	compactor interface {
		etcd3.Compactor
		Stop()
	}
	refs int
}

func newDatastoreClients() *datastoreClients {
	return &datastoreClients{clients: map[string]*datastoreClient{}}
}

// rawStorage is upstream's etcd3 storage of one resource (what
// generic.NewRawStorage builds) over the datastore's shared client.
func (d *datastoreClients) rawStorage(config *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object,
	resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	shared, release, err := d.acquire(config.Transport, config.CompactionInterval)
	if err != nil {
		return nil, nil, err
	}
	transformer := config.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	var decoder etcd3.Decoder = aheadDecoder{etcd3.NewDefaultDecoder(config.Codec, versioner)}
	unsafeDeletion := utilfeature.DefaultFeatureGate.Enabled(genericfeatures.AllowUnsafeMalformedObjectDeletion)
	if unsafeDeletion {
		transformer = etcd3.WithCorruptObjErrorHandlingTransformer(transformer)
		decoder = etcd3.WithCorruptObjErrorHandlingDecoder(decoder)
	}
	store, err := etcd3.New(shared.client, shared.compactor, config.Codec, newFunc, newListFunc, config.Prefix, resourcePrefix,
		config.GroupResource, transformer, config.LeaseManagerConfig, decoder, versioner)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("storage of %s: %w", config.GroupResource, err)
	}
	var once sync.Once
	destroy := func() {
		// Upstream calls a storage's destroy func more than once (its
		// subresources share it).
		once.Do(func() {
			store.Close()
			release()
		})
	}
	var s storage.Interface = store
	if unsafeDeletion {
		s = etcd3.NewStoreWithUnsafeCorruptObjectDeletion(s, config.GroupResource)
	}
	return s, destroy, nil
}

// undecoratedStorage is generic.UndecoratedStorage over the shared client.
func (d *datastoreClients) undecoratedStorage(config *storagebackend.ConfigForResource, resourcePrefix string,
	_ func(obj runtime.Object) (string, error), newFunc, newListFunc func() runtime.Object,
	_ storage.AttrFunc, _ storage.IndexerFuncs, _ *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
	return d.rawStorage(config, newFunc, newListFunc, resourcePrefix)
}

// acquire returns the client of the datastore tc names, made on
// first use, and the func that gives it back; the last one given back
// closes it.
func (d *datastoreClients) acquire(tc storagebackend.TransportConfig, compaction time.Duration) (*datastoreClient, func(), error) {
	key := strings.Join(append([]string{tc.CertFile, tc.KeyFile, tc.TrustedCAFile}, tc.ServerList...), "|")
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.clients[key]
	if !ok {
		client, err := d.newClient(tc)
		if err != nil {
			return nil, nil, err
		}
		client.KV = observingKV{KV: client.KV, observed: &d.observed}
		c = &datastoreClient{client: client}
		if compaction > 0 {
			c.compactor = etcd3.StartCompactorPerEndpoint(client.Client, compaction)
		}
		d.clients[key] = c
	}
	c.refs++
	var once sync.Once
	return c, func() { once.Do(func() { d.release(key) }) }, nil
}

func (d *datastoreClients) release(key string) {
	d.mu.Lock()
	c := d.clients[key]
	c.refs--
	last := c.refs == 0
	if last {
		delete(d.clients, key)
	}
	d.mu.Unlock()
	if !last {
		return
	}
	if c.compactor != nil {
		c.compactor.Stop()
	}
	_ = c.client.Close()
}

// useLocal makes the storages of the datastore at endpoints use clients
// from local: the datastore runs in this process and they call it
// directly.
func (d *datastoreClients) useLocal(endpoints []string, local func() *clientv3.Client) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.local, d.localEndpoints = local, slices.Clone(endpoints)
}

func (d *datastoreClients) newClient(tc storagebackend.TransportConfig) (*etcdkubernetes.Client, error) {
	if d.local == nil || !slices.Equal(tc.ServerList, d.localEndpoints) {
		return newDatastoreClient(tc)
	}
	client := &etcdkubernetes.Client{Client: d.local()}
	client.Kubernetes = aheadLister{Interface: client}
	client.KV = etcd3.NewETCDLatencyTracker(client.KV)
	return client, nil
}

// newDatastoreClient connects to the datastore as upstream's storage
// factory does (TLS files, keepalives), and waits until the connection is
// up.
func newDatastoreClient(tc storagebackend.TransportConfig) (*etcdkubernetes.Client, error) {
	cfg := clientv3.Config{
		Endpoints:            tc.ServerList,
		DialTimeout:          datastoreDialTimeout,
		DialKeepAliveTime:    datastoreKeepaliveTime,
		DialKeepAliveTimeout: datastoreKeepaliveTimeout,
		// Errors reach the apiserver's callers; the client's own log
		// would repeat them in another format.
		Logger: zap.NewNop(),
	}
	if tc.CertFile != "" || tc.KeyFile != "" || tc.TrustedCAFile != "" {
		tlsInfo := transport.TLSInfo{CertFile: tc.CertFile, KeyFile: tc.KeyFile, TrustedCAFile: tc.TrustedCAFile}
		tlsConfig, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("datastore client TLS: %w", err)
		}
		cfg.TLS = tlsConfig
	}
	client, err := etcdkubernetes.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("datastore client: %w", err)
	}
	client.Kubernetes = aheadLister{Interface: client.Kubernetes}
	// Every storage's reads and writes are timed, once.
	client.KV = etcd3.NewETCDLatencyTracker(client.KV)
	if err := waitUntilConnected(client.Client, datastoreDialTimeout); err != nil {
		_ = client.Close()
		return nil, err
	}
	return client, nil
}

// waitUntilConnected returns once the client's connection is ready, as
// upstream's storage factory waits before it hands a client out: the
// first requests would otherwise fail while it connects.
func waitUntilConnected(client *clientv3.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn := client.ActiveConnection()
	if conn == nil {
		return fmt.Errorf("datastore client has no connection")
	}
	for {
		state := conn.GetState()
		switch state {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, state) {
			return fmt.Errorf("datastore connection not ready: %w", ctx.Err())
		}
	}
}
