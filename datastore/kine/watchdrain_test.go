package kine

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"kplane.dev/kplane/test/e2e/framework"
)

// TestClosedWatchStreamEndsItsWatchesFirst closes an etcd client holding
// watches with progress notification (as each watch cache of the apiserver
// does at shutdown) and checks, on the stream kine's handler sees, that
// every watch ended on its own, sending its cancel response, before the
// handler returned (kine's handler ends a watch without a response), and
// that no watch sent empty responses of revision 0 (kine's loop over a
// closed progress channel).
func TestClosedWatchStreamEndsItsWatchesFirst(t *testing.T) {
	const watches = 50
	observer := &watchStreamObserver{handlerDone: make(chan struct{})}
	dir := t.TempDir()
	client, stop := startTestKine(t, Config{Endpoint: SQLiteEndpoint(filepath.Join(dir, "db", "state.db")), SocketDir: dir},
		grpcServer(observer.intercept))
	t.Cleanup(stop)
	ctx := context.Background()
	for i := range watches {
		ch := client.Watch(ctx, fmt.Sprintf("/registry/kind%d/", i), clientv3.WithPrefix(),
			clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
		if resp := <-ch; !resp.Created {
			t.Fatalf("watch %d: want its created response, got %+v", i, resp)
		}
	}
	if err := client.Close(); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "kine's watch handler returns", func(context.Context) error {
		select {
		case <-observer.handlerDone:
			return nil
		default:
			return fmt.Errorf("still running")
		}
	})
	canceled, empty := observer.counts()
	if canceled != watches {
		t.Errorf("%d of %d watches sent their cancel response before the handler returned", canceled, watches)
	}
	if empty != 0 {
		t.Errorf("%d empty responses of revision 0 were sent", empty)
	}
}

// watchStreamObserver counts what kine sends on the watch stream, seen
// outside endWatchesFirst, until kine's handler returns.
type watchStreamObserver struct {
	mu          sync.Mutex
	canceled    int
	empty       int
	handlerDone chan struct{}
}

func (o *watchStreamObserver) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != watchMethod {
		return handler(srv, ss)
	}
	defer close(o.handlerDone)
	return handler(srv, &observedStream{ServerStream: ss, o: o})
}

func (o *watchStreamObserver) counts() (canceled, empty int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.canceled, o.empty
}

type observedStream struct {
	grpc.ServerStream
	o *watchStreamObserver
}

func (s *observedStream) SendMsg(m any) error {
	if resp, ok := m.(*etcdserverpb.WatchResponse); ok {
		s.o.mu.Lock()
		switch {
		case resp.Canceled:
			s.o.canceled++
		case !resp.Created && len(resp.Events) == 0 && resp.Header.GetRevision() == 0:
			s.o.empty++
		}
		s.o.mu.Unlock()
	}
	return s.ServerStream.SendMsg(m)
}
