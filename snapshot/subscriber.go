package snapshot

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
)

// subscriber is one delta stream as the taps see it: the plane and
// namespace it covers and the events handed to it that it has not written
// yet. Taps never wait for it: a stream that falls too far behind loses
// its place and ends.
type subscriber struct {
	plane     string
	namespace string
	backlog   int
	// notify has a value when something was queued or the place was lost.
	notify chan struct{}

	mu    sync.Mutex
	queue []queued
	// caughtUp is how many history events were queued on joining: they do
	// not count against the backlog.
	caughtUp int
	lost     *lostPlace

	// joined are the stream's places in the taps (the stream's goroutine
	// only).
	joined []*subscription
}

// queued is an event for one target of the stream.
type queued struct {
	target int
	event  tapEvent
}

// lostPlace is why a stream cannot go on.
type lostPlace struct {
	target int
	reason string
}

func newSubscriber(plane, namespace string, backlog int) *subscriber {
	return &subscriber{plane: plane, namespace: namespace, backlog: backlog, notify: make(chan struct{}, 1)}
}

// wants reports whether e is in the stream's namespace (a tap only hands a
// stream its plane's events).
func (s *subscriber) wants(e tapEvent) bool {
	if s.namespace == "" {
		return true
	}
	accessor, err := meta.Accessor(e.obj)
	return err == nil && accessor.GetNamespace() == s.namespace
}

// offer queues e; live events (bounded) beyond the backlog lose the
// stream its place. It reports whether the stream still has one.
func (s *subscriber) offer(target int, e tapEvent, bounded bool) bool {
	s.mu.Lock()
	if s.lost != nil {
		s.mu.Unlock()
		return false
	}
	if bounded && len(s.queue) >= s.backlog+s.caughtUp {
		s.lost = &lostPlace{target: target, reason: "the stream was read too slowly"}
		clear(s.queue)
		s.queue = nil
		s.mu.Unlock()
		s.signal()
		return false
	}
	s.queue = append(s.queue, queued{target: target, event: e})
	if !bounded {
		s.caughtUp++
	}
	s.mu.Unlock()
	s.signal()
	return true
}

// lose ends the stream: its place in target is gone for reason.
func (s *subscriber) lose(target int, reason string) {
	s.mu.Lock()
	if s.lost == nil {
		s.lost = &lostPlace{target: target, reason: reason}
	}
	s.mu.Unlock()
	s.signal()
}

func (s *subscriber) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take returns what is queued, swapping in spare (emptied) as the new
// queue, and whether the stream lost its place.
func (s *subscriber) take(spare []queued) ([]queued, *lostPlace) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue
	s.queue, s.caughtUp = spare[:0], 0
	return q, s.lost
}

// leave takes the stream out of every tap it joined.
func (s *subscriber) leave() {
	for _, j := range s.joined {
		if j.tap != nil {
			j.tap.remove(j)
		}
	}
	s.joined = nil
}
