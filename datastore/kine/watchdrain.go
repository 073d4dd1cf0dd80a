package kine

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// watchMethod is the etcd API's watch stream.
const watchMethod = "/etcdserverpb.Watch/Watch"

// watchEndTimeout bounds how long a finished watch stream waits for its
// watches to end. They end within milliseconds; past it the stream ends as
// kine would end it.
const watchEndTimeout = 2 * time.Second

// endWatchesFirst is a stream interceptor for kine's watch stream: when
// the stream ends (its client closed it, or the server is stopping), the
// watches on it end before kine's handler learns that the stream is done.
//
// kine (v0.17) ends a watch by closing its progress-notification channel
// first and cancelling it second. The watch's loop, which selects on that
// channel and on its events, then receives from the closed channel without
// end, sending an empty response each turn, until its event channel is
// closed a few goroutine hand-offs later. When a client with many watches
// goes (every storage of the apiserver closes its client at shutdown), tens
// of loops spin at once and the hand-offs that would stop them wait for a
// CPU behind them: most of an idle server's shutdown, seconds on a loaded
// machine. Here the watches are cancelled through the stream's context
// while kine's handler still waits for the next request, so each loop sees
// its events end and sends its cancel response; only then does the handler
// get the stream's error and close the progress channels of loops that
// have already returned.
func endWatchesFirst(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != watchMethod {
		return handler(srv, ss)
	}
	watches := newStreamWatches(ss.Context())
	defer watches.cancel()
	return handler(srv, &watchStream{ServerStream: ss, watches: watches})
}

// watchStream is a gRPC watch stream whose watches end first.
type watchStream struct {
	grpc.ServerStream
	watches *streamWatches
}

// Context is the context kine derives every watch of the stream from.
func (s *watchStream) Context() context.Context { return s.watches.ctx }

func (s *watchStream) SendMsg(m any) error {
	if resp, ok := m.(*etcdserverpb.WatchResponse); ok {
		s.watches.sent(resp)
	}
	return s.ServerStream.SendMsg(m)
}

func (s *watchStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	s.watches.received(err)
	return err
}

// streamWatches knows which watches of a stream are open: kine answers
// each watch's creation with Created and its end with Canceled.
type streamWatches struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	open  map[int64]struct{}
	ended chan struct{}
}

func newStreamWatches(parent context.Context) *streamWatches {
	ctx, cancel := context.WithCancel(parent)
	return &streamWatches{ctx: ctx, cancel: cancel, open: map[int64]struct{}{}, ended: make(chan struct{}, 1)}
}

// received ends the stream's watches, and waits for them, once the stream
// has nothing more to receive.
func (s *streamWatches) received(err error) {
	if err != nil {
		s.cancel()
		s.waitWatchesEnded()
	}
}

func (s *streamWatches) sent(resp *etcdserverpb.WatchResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case resp.Canceled:
		delete(s.open, resp.WatchId)
		select {
		case s.ended <- struct{}{}:
		default:
		}
	case resp.Created:
		s.open[resp.WatchId] = struct{}{}
	}
}

func (s *streamWatches) openWatches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// waitWatchesEnded waits until every watch of the stream has sent its
// cancel response, or watchEndTimeout.
func (s *streamWatches) waitWatchesEnded() {
	timeout := time.NewTimer(watchEndTimeout)
	defer timeout.Stop()
	for s.openWatches() > 0 {
		select {
		case <-s.ended:
		case <-timeout.C:
			return
		}
	}
}
