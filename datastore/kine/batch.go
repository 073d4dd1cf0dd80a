package kine

import (
	"bytes"
	"context"

	"github.com/k3s-io/kine/pkg/server"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	kplanesqlite "kplane.dev/kplane/datastore/sqlite"
)

// etcdAPI is the etcd API kine serves over a backend: bridge's, with one
// transaction more where the backend can commit it (batchKV).
type etcdAPI struct {
	bridge       *server.KVServerBridge
	kv           etcdserverpb.KVServer
	batchDeletes bool
}

func newEtcdAPI(bridge *server.KVServerBridge, backend server.Backend) etcdAPI {
	if deleter, ok := backend.(kplanesqlite.BatchDeleter); ok {
		return etcdAPI{bridge: bridge, kv: batchKV{KVServer: bridge, deleter: deleter}, batchDeletes: true}
	}
	return etcdAPI{bridge: bridge, kv: bridge}
}

// register serves api on grpcServer, as bridge.Register does.
func register(grpcServer *grpc.Server, api etcdAPI) {
	etcdserverpb.RegisterLeaseServer(grpcServer, api.bridge)
	etcdserverpb.RegisterWatchServer(grpcServer, api.bridge)
	etcdserverpb.RegisterClusterServer(grpcServer, api.bridge)
	etcdserverpb.RegisterMaintenanceServer(grpcServer, api.bridge)
	etcdserverpb.RegisterKVServer(grpcServer, api.kv)
	healthServer := health.NewServer()
	healthServer.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(grpcServer, healthServer)
	reflection.Register(grpcServer)
}

// batchKV is kine's KV API plus the transaction batchDeletions describes,
// which kine refuses (it serves only the transactions the apiserver
// sends, one key each).
type batchKV struct {
	etcdserverpb.KVServer
	deleter kplanesqlite.BatchDeleter
}

// Txn implements etcdserverpb.KVServer.
func (k batchKV) Txn(ctx context.Context, txn *etcdserverpb.TxnRequest) (*etcdserverpb.TxnResponse, error) {
	deletions, ok := batchDeletions(txn)
	if !ok {
		return k.KVServer.Txn(ctx, txn)
	}
	revisions, deleted, err := k.deleter.DeleteBatch(ctx, deletions)
	if err != nil {
		return nil, err
	}
	if !deleted {
		return &etcdserverpb.TxnResponse{Header: &etcdserverpb.ResponseHeader{}}, nil
	}
	// Each deletion's response carries its own revision (etcd's would all
	// carry the transaction's one).
	response := &etcdserverpb.TxnResponse{Header: &etcdserverpb.ResponseHeader{Revision: revisions[len(revisions)-1]}, Succeeded: true}
	for _, revision := range revisions {
		response.Responses = append(response.Responses, &etcdserverpb.ResponseOp{
			Response: &etcdserverpb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: &etcdserverpb.DeleteRangeResponse{
				Header: &etcdserverpb.ResponseHeader{Revision: revision}, Deleted: 1,
			}},
		})
	}
	return response, nil
}

// batchDeletions reads the transaction "if key i's mod revision is r i,
// for every i, delete every key i" (one key each, no range, nothing done
// otherwise): the deletions of a BatchDeleter. Any other transaction is
// kine's.
func batchDeletions(txn *etcdserverpb.TxnRequest) ([]kplanesqlite.Deletion, bool) {
	if len(txn.Compare) == 0 || len(txn.Compare) != len(txn.Success) || len(txn.Failure) != 0 {
		return nil, false
	}
	deletions := make([]kplanesqlite.Deletion, len(txn.Compare))
	for i, compare := range txn.Compare {
		op := txn.Success[i].GetRequestDeleteRange()
		if compare.Target != etcdserverpb.Compare_MOD || compare.Result != etcdserverpb.Compare_EQUAL ||
			len(compare.RangeEnd) != 0 || op == nil || len(op.RangeEnd) != 0 || op.PrevKv ||
			!bytes.Equal(compare.Key, op.Key) || compare.GetModRevision() <= 0 {
			return nil, false
		}
		deletions[i] = kplanesqlite.Deletion{Key: string(op.Key), Revision: compare.GetModRevision()}
	}
	return deletions, true
}
