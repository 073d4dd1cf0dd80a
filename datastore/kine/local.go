package kine

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"kplane.dev/kplane/datastore/driver"
)

// NewClient implements driver.InProcess: a client of kine in this process
// whose calls are function calls, as etcd's own in-process client
// (v3client) is to an embedded etcd. Over the unix socket every request
// and answer was encoded, framed and copied twice through the kernel, for
// one or more calls per API request: the direct calls took 4-7 % off the
// server's CPU per plain plane made.
func (api etcdAPI) NewClient() *clientv3.Client {
	c := clientv3.NewCtxClient(context.Background())
	c.KV = clientv3.NewKVFromKVClient(adapter.KvServerToKvClient(boundedKV{api.kv}), c)
	c.Watcher = clientv3.NewWatchFromWatchClient(driver.QueueWatchSends(adapter.WatchServerToWatchClient(localWatch{api.bridge})), c)
	// One second is the lessor's sign to use its default keep-alive
	// timeout; the apiserver only grants leases, it keeps none alive.
	c.Lease = clientv3.NewLeaseFromLeaseClient(adapter.LeaseServerToLeaseClient(api.bridge), c, time.Second)
	c.Maintenance = clientv3.NewMaintenanceFromMaintenanceClient(adapter.MaintenanceServerToMaintenanceClient(api.bridge), c)
	return c
}

// maxRequestBytes is the largest write the gRPC server takes (grpcServer):
// an in-process client is held to the same limit, so that an object too
// large for the datastore is refused the same way whichever way it came.
const maxRequestBytes = int(embed.DefaultMaxRequestBytes) + grpcFramingBytes

// boundedKV refuses writes larger than maxRequestBytes as gRPC does.
type boundedKV struct{ etcdserverpb.KVServer }

func (k boundedKV) Put(ctx context.Context, r *etcdserverpb.PutRequest) (*etcdserverpb.PutResponse, error) {
	if err := checkSize(r); err != nil {
		return nil, err
	}
	return k.KVServer.Put(ctx, r)
}

func (k boundedKV) Txn(ctx context.Context, r *etcdserverpb.TxnRequest) (*etcdserverpb.TxnResponse, error) {
	if err := checkSize(r); err != nil {
		return nil, err
	}
	return k.KVServer.Txn(ctx, r)
}

func checkSize(m proto.Message) error {
	if size := proto.Size(m); size > maxRequestBytes {
		return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", size, maxRequestBytes)
	}
	return nil
}

// localWatch is kine's watch stream for in-process clients; its watches
// end first when the stream ends, as endWatchesFirst makes them over gRPC.
type localWatch struct{ etcdserverpb.WatchServer }

func (w localWatch) Watch(ws etcdserverpb.Watch_WatchServer) error {
	watches := newStreamWatches(ws.Context())
	defer watches.cancel()
	return w.WatchServer.Watch(&localWatchStream{Watch_WatchServer: ws, watches: watches})
}

type localWatchStream struct {
	etcdserverpb.Watch_WatchServer
	watches *streamWatches
}

// Context is the context kine derives every watch of the stream from.
func (s *localWatchStream) Context() context.Context { return s.watches.ctx }

func (s *localWatchStream) Send(resp *etcdserverpb.WatchResponse) error {
	s.watches.sent(resp)
	return s.Watch_WatchServer.Send(resp)
}

func (s *localWatchStream) Recv() (*etcdserverpb.WatchRequest, error) {
	req, err := s.Watch_WatchServer.Recv()
	s.watches.received(err)
	return req, err
}
