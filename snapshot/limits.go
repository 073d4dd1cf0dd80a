package snapshot

import (
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Defaults of StreamLimits (the flags of `kplane server`).
const (
	DefaultMaxStreamsPerUser = 100
	DefaultMaxStreams        = 2000
	DefaultMaxStreamTimeout  = 30 * time.Minute
)

// StreamLimits bound the delta streams a server holds open.
type StreamLimits struct {
	// PerUser is the most streams one identity (a user name within a
	// plane) may hold open at once (0: no limit).
	PerUser int
	// Total is the most streams the server holds open at once, all planes
	// and users together (0: no limit).
	Total int
	// MaxTimeout ends every stream at the latest this long after it began;
	// a stream's timeoutSeconds can only shorten it (0:
	// DefaultMaxStreamTimeout).
	MaxTimeout time.Duration
}

// streamRetryAfter is what a refused stream is told to wait, in seconds.
const streamRetryAfter = 5

// streamCounter counts open streams against the limits.
type streamCounter struct {
	limits StreamLimits

	mu     sync.Mutex
	total  int
	byUser map[streamOwner]int
}

// streamOwner is an identity: a user of a plane. The same user name in
// two planes is two identities (a service account "default/robot" of one
// plane has nothing to do with another plane's), so one plane's streams
// never use up another's.
type streamOwner struct {
	plane, user string
}

func newStreamCounter(limits StreamLimits) *streamCounter {
	return &streamCounter{limits: limits, byUser: map[streamOwner]int{}}
}

// acquire counts a new stream of user in plane, or refuses it with 429
// TooManyRequests; release uncounts it.
func (c *streamCounter) acquire(plane, user string) (release func(), err error) {
	owner := streamOwner{plane: plane, user: user}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.byUser[owner]; c.limits.PerUser > 0 && n >= c.limits.PerUser {
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf(
			"too many delta streams: user %q already holds %d open in plane %q, the most one user may; close one or retry later",
			user, n, plane), streamRetryAfter)
	}
	if c.limits.Total > 0 && c.total >= c.limits.Total {
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf(
			"too many delta streams: the server holds %d open, the most it serves at once; retry later", c.total), streamRetryAfter)
	}
	c.total++
	c.byUser[owner]++
	var once sync.Once
	return func() { once.Do(func() { c.release(owner) }) }, nil
}

func (c *streamCounter) release(owner streamOwner) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.byUser[owner]--; c.byUser[owner] <= 0 {
		delete(c.byUser, owner)
	}
}

// open is the number of streams open.
func (c *streamCounter) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// timeout is how long a stream that asked for requested (0: nothing) runs.
func (l StreamLimits) timeout(requested time.Duration) time.Duration {
	limit := l.MaxTimeout
	if limit <= 0 {
		limit = DefaultMaxStreamTimeout
	}
	if requested <= 0 || requested > limit {
		return limit
	}
	return requested
}
