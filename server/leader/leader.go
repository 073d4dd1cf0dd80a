package leader

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Namespace holds the Leases, in the root plane.
const Namespace = "kube-system"

// Timing is how a Lease is held. A server that dies (kill -9) is replaced
// at most LeaseDuration + RetryPeriod after its last renewal.
type Timing struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultTiming takes over a dead server's work within about 12 s: the
// Lease's 10 s and one retry (client-go waits 1 to 2.2 s between tries).
// A holder on a loaded 2-core machine has 7 s, three tries or more, to
// renew; it stops its work 3 s or more before another may start.
var DefaultTiming = Timing{LeaseDuration: 10 * time.Second, RenewDeadline: 7 * time.Second, RetryPeriod: time.Second}

// Config is one kind of work and its Lease.
type Config struct {
	// Lease names the Lease (and the work, in logs and metrics).
	Lease string
	// Identity is this server's name, unique among the servers.
	Identity string
	// Client reaches the root plane.
	Client kubernetes.Interface
	Timing Timing
	// Sole says no other server can share the datastore (SQLite): the
	// work runs at once, without renewing a Lease
	// every second forever, and the Lease only names this server.
	Sole bool
	// Term runs the work until ctx is done. It is called once per won
	// Lease; it must build what it needs afresh or reuse what it built
	// safely, and return soon after ctx is done.
	Term func(ctx context.Context)
}

// Elector campaigns for one Lease and runs its terms.
type Elector struct {
	config  Config
	leading atomic.Bool
	holder  atomic.Value // string
	// term is held by the running term: one term at a time, even when a
	// won Lease starts the next before the last has returned.
	term sync.Mutex
}

// New checks config; Run campaigns.
func New(config Config) (*Elector, error) {
	if config.Lease == "" || config.Identity == "" || config.Client == nil || config.Term == nil {
		return nil, fmt.Errorf("leader election: a Lease name, an identity, a client and a term are needed")
	}
	if config.Timing == (Timing{}) {
		config.Timing = DefaultTiming
	}
	e := &Elector{config: config}
	e.holder.Store("")
	return e, nil
}

// Lease is the name of the Lease.
func (e *Elector) Lease() string { return e.config.Lease }

// Identity is this server's name.
func (e *Elector) Identity() string { return e.config.Identity }

// Leading reports whether this server holds the Lease.
func (e *Elector) Leading() bool { return e.leading.Load() }

// Holder is the server that holds the Lease as last observed ("" before
// the first observation).
func (e *Elector) Holder() string { return e.holder.Load().(string) }

// Run campaigns until ctx is done: a lost Lease ends the term (its
// context is cancelled, and Run waits for it to return) and the server
// campaigns again. On a graceful stop the Lease is released, so another
// server takes over at once; Run returns once the term has returned and
// the Lease is released (or releaseTimeout has passed).
func (e *Elector) Run(ctx context.Context) {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, Namespace, e.config.Lease,
		e.config.Client.CoreV1(), e.config.Client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: e.config.Identity})
	if err != nil {
		logrus.WithError(err).WithField("lease", e.config.Lease).Error("leader election cannot start; this server runs none of its work")
		return
	}
	if e.config.Sole {
		e.runSole(ctx, lock)
		return
	}
	e.waitForNamespace(ctx)
	for ctx.Err() == nil {
		e.campaign(ctx, lock)
	}
	// client-go runs the term in a goroutine of its own: wait for it (a
	// term that had yet to start sees its context done and returns), so
	// that the next holder starts only once this term has ended.
	e.term.Lock()
	defer e.term.Unlock()
	e.release(ctx, lock)
}

// waitForNamespace returns once the Leases' namespace exists or ctx is
// done. The first server on a new datastore creates the root plane's
// kube-system while its elections start; a campaign that finds no
// namespace tries again only after its retry period (1 to 2.2 s), time
// enough for a server started after it to take the Lease it was about to.
func (e *Elector) waitForNamespace(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := e.config.Client.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
		return err == nil, nil
	})
}

// releaseTimeout bounds the release of a Lease at a graceful stop. The
// release only lets another server take over at once instead of when the
// Lease expires: a datastore that cannot answer within it (a cluster
// without quorum) must not hold the stop. client-go's own release waits
// up to the renew deadline (7 s), and a stopping server waited that long
// for each of its Leases on a datastore without quorum.
const releaseTimeout = 2 * time.Second

// release gives the Lease up if it still names this server.
func (e *Elector) release(ctx context.Context, lock resourcelock.Interface) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	// Get also primes the lock, whose Update writes over what it read.
	record, _, err := lock.Get(rctx)
	if err != nil {
		e.releaseFailed(err)
		return
	}
	if record.HolderIdentity != e.config.Identity {
		return
	}
	if err := lock.Update(rctx, releasedRecord(*record)); err != nil {
		e.releaseFailed(err)
	}
}

// releasedRecord names no holder, and expires at once.
func releasedRecord(held resourcelock.LeaderElectionRecord) resourcelock.LeaderElectionRecord {
	now := metav1.NewTime(time.Now())
	return resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1, AcquireTime: now, RenewTime: now,
		LeaderTransitions: held.LeaderTransitions}
}

// releaseFailed is said at warning level: another server now waits for
// the Lease to expire before it takes the work over.
func (e *Elector) releaseFailed(err error) {
	logrus.WithError(err).WithField("lease", e.config.Lease).Warn("the Lease was not released at the stop; it expires instead")
}

// campaign waits for the Lease and runs one term while it is held.
func (e *Elector) campaign(ctx context.Context, lock resourcelock.Interface) {
	t := e.config.Timing
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		// Released by Run, within releaseTimeout.
		Lock: lock, Name: e.config.Lease, ReleaseOnCancel: false,
		LeaseDuration: t.LeaseDuration, RenewDeadline: t.RenewDeadline, RetryPeriod: t.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				e.term.Lock()
				defer e.term.Unlock()
				if ctx.Err() != nil {
					return
				}
				e.leading.Store(true)
				logrus.WithFields(logrus.Fields{"lease": e.config.Lease, "server": e.config.Identity}).Info("leading: starting the work")
				e.config.Term(ctx)
			},
			OnStoppedLeading: func() {
				if e.leading.Swap(false) {
					logrus.WithFields(logrus.Fields{"lease": e.config.Lease, "server": e.config.Identity}).Info("lease lost or released: the work stopped")
				}
			},
			OnNewLeader: func(identity string) {
				e.holder.Store(identity)
			},
		},
	})
	if err != nil {
		logrus.WithError(err).WithField("lease", e.config.Lease).Error("leader election cannot start; this server runs none of its work")
		<-ctx.Done()
		return
	}
	elector.Run(ctx)
}

// soleLease is how long a sole server's Lease says it is held: for good,
// until the next start overwrites it.
const soleLease = 1 << 30 * time.Second

// runSole runs the work of a server alone on its datastore: the Lease is
// written once (so that `kplane planes list` and the metrics name the
// holder), and released when the server stops. The work starts at once:
// nothing else can run it, and the Lease, written while the root plane
// starts, only names this server.
func (e *Elector) runSole(ctx context.Context, lock resourcelock.Interface) {
	e.holder.Store(e.config.Identity)
	e.leading.Store(true)
	logrus.WithFields(logrus.Fields{"lease": e.config.Lease, "server": e.config.Identity}).Info("sole server on its datastore: starting the work")
	written := make(chan resourcelock.LeaderElectionRecord, 1)
	go func() {
		defer close(written)
		if record, ok := e.writeSoleLease(ctx, lock); ok {
			written <- record
		}
	}()
	e.config.Term(ctx)
	e.leading.Store(false)
	record, ok := <-written
	if !ok {
		return
	}
	// Nothing else writes a sole server's Lease: the lock still holds
	// what was written, and one write gives it up.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := lock.Update(rctx, releasedRecord(record)); err != nil {
		e.releaseFailed(err)
	}
}

// writeSoleLease names this server in the Lease, retrying (the root
// plane's kube-system may not exist yet on a loaded machine's first
// start) until it is written or ctx is done.
func (e *Elector) writeSoleLease(ctx context.Context, lock resourcelock.Interface) (resourcelock.LeaderElectionRecord, bool) {
	now := metav1.NewTime(time.Now())
	record := resourcelock.LeaderElectionRecord{HolderIdentity: e.config.Identity,
		LeaseDurationSeconds: int(soleLease / time.Second), AcquireTime: now, RenewTime: now}
	backoff := wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 2 * time.Second}
	attempts := 0
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		old, _, err := lock.Get(ctx)
		switch {
		case apierrors.IsNotFound(err):
			err = lock.Create(ctx, record)
		case err == nil:
			record.LeaderTransitions = old.LeaderTransitions
			err = lock.Update(ctx, record)
		}
		if attempts++; err != nil && attempts == 10 {
			logrus.WithError(err).WithField("lease", e.config.Lease).Warn("the Lease does not name this server yet; retrying")
		}
		return err == nil, nil
	})
	return record, err == nil
}

// The Leases of kplane's work, in the root plane's kube-system.
const (
	// PlanesLease: the plane lifecycle (provisioning, deletion, reset,
	// usage in status), CRD conditions, Fleets and --manifests-dir.
	PlanesLease = "kplane-planes"
	// ControllersLease: the generic controllers (namespace deletion,
	// garbage collection, service accounts, quotas, ...).
	ControllersLease = "kplane-controllers"
	// SimulationLease: the workload simulation.
	SimulationLease = "kplane-simulation"
)
