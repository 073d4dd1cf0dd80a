package driver

import (
	"context"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// QueueWatchSends returns wc whose streams take a request at once, queue
// it and send it from a goroutine of their own.
//
// An in-process client reaches its datastore's watch server through a pipe
// that holds no message (etcd's grpcproxy adapter). etcd's client sends its
// requests (create, cancel, progress) from the loop that also takes the
// server's answers; kine answers a cancellation from the loop that reads
// the requests, and etcd's server does so once its queue of sixteen
// control answers is full. A burst of cancellations while events flow
// left each side waiting for the other to read, and every watch of the
// client stopped for good: with one client for every storage, every watch
// cache of the server. Over gRPC the transport's buffers keep the two
// apart; here the queue does. It holds requests only: a creation and a
// cancellation per watch, a progress request now and then.
func QueueWatchSends(wc etcdserverpb.WatchClient) etcdserverpb.WatchClient {
	return queuedWatchClient{wc}
}

type queuedWatchClient struct{ etcdserverpb.WatchClient }

func (c queuedWatchClient) Watch(ctx context.Context, opts ...grpc.CallOption) (etcdserverpb.Watch_WatchClient, error) {
	stream, err := c.WatchClient.Watch(ctx, opts...)
	if err != nil {
		return nil, err
	}
	s := &queuedWatchStream{Watch_WatchClient: stream, wake: make(chan struct{}, 1)}
	go s.sendQueued()
	return s, nil
}

// queuedWatchStream is a watch stream whose Send and CloseSend return at
// once; sendQueued sends in their order.
type queuedWatchStream struct {
	etcdserverpb.Watch_WatchClient

	mu      sync.Mutex
	queue   []*etcdserverpb.WatchRequest
	closing bool  // CloseSend was called: the stream closes once queue is sent
	err     error // the send that failed: the stream is broken
	wake    chan struct{}
}

func (s *queuedWatchStream) Send(req *etcdserverpb.WatchRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.queue = append(s.queue, req)
	s.signal()
	return nil
}

func (s *queuedWatchStream) CloseSend() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	s.signal()
	return nil
}

func (s *queuedWatchStream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// sendQueued sends the queued requests in order until the stream is
// closed, broken or done.
func (s *queuedWatchStream) sendQueued() {
	for {
		req, closing := s.next()
		switch {
		case req != nil:
			if err := s.Watch_WatchClient.Send(req); err != nil {
				s.mu.Lock()
				s.err, s.queue = err, nil
				s.mu.Unlock()
				return
			}
		case closing:
			_ = s.Watch_WatchClient.CloseSend()
			return
		default:
			select {
			case <-s.wake:
			case <-s.Context().Done():
				return
			}
		}
	}
}

// next takes the oldest queued request, if any, and tells whether the
// stream is to be closed once the queue is empty.
func (s *queuedWatchStream) next() (*etcdserverpb.WatchRequest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return nil, s.closing
	}
	req := s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	return req, false
}
