package clusterroleaggregation

import (
	"sync"
	"time"
)

// settle is how long a plane's ClusterRoles must stay unchanged before
// they are aggregated. A plane's bootstrap writes all its roles at once (in
// parallel, the aggregated ones already filled in); aggregating while it is
// under way would apply rules from half the roles, then apply again.
const settle = time.Second

// quiet knows when the ClusterRoles of each plane with a sync pending last
// changed. A plane is forgotten once it is due, so idle planes cost nothing.
type quiet struct {
	mu   sync.Mutex
	last map[string]time.Time
	now  func() time.Time
}

func newQuiet(now func() time.Time) *quiet {
	return &quiet{last: map[string]time.Time{}, now: now}
}

// changed records that a ClusterRole of plane changed now.
func (q *quiet) changed(plane string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.last[plane] = q.now()
}

// forget drops plane (gone, or being deleted).
func (q *quiet) forget(plane string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.last, plane)
}

// wait returns how much longer plane must stay unchanged before it is
// synced; zero when it is due (it is then forgotten).
func (q *quiet) wait(plane string) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	last, ok := q.last[plane]
	if !ok {
		return 0
	}
	if left := settle - q.now().Sub(last); left > 0 {
		return left
	}
	delete(q.last, plane)
	return 0
}
