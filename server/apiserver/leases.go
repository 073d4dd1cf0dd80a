package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"kplane.dev/kplane/fleet"
	"kplane.dev/kplane/server/autoapply"
	"kplane.dev/kplane/server/leader"
	kplanemetrics "kplane.dev/kplane/server/metrics"
)

// electors campaign for the work one server at a time runs when several
// share a datastore; each won Lease starts its work afresh.
type electors struct {
	all []*leader.Elector
	// planes is the elector of the plane lifecycle's Lease (which also
	// keeps --manifests-dir applied).
	planes *leader.Elector
	// firstPass is closed after the first pass over --manifests-dir of
	// this server's first term (nil: no manifests directory).
	firstPass     chan struct{}
	firstPassOnce sync.Once
}

// newElectors builds the electors of this server: every server campaigns
// for the plane lifecycle; only a server that runs the generic controllers
// (no --disable-controllers) campaigns for them, and only one that
// simulates workloads for the simulation.
func (c CompletedConfig) newElectors(s components) (*electors, error) {
	client, err := kubernetes.NewForConfig(s.loopback)
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	e := &electors{}
	var applier func() (*autoapply.Applier, error)
	if c.config.ManifestsDir != "" {
		e.firstPass = make(chan struct{})
		applier = func() (*autoapply.Applier, error) {
			return autoapply.New(autoapply.Config{Dir: c.config.ManifestsDir, Loopback: s.loopback})
		}
		// The directory is checked at start, not at the first term.
		if _, err := applier(); err != nil {
			return nil, err
		}
	}
	add := func(lease string, term func(context.Context)) error {
		el, err := leader.New(leader.Config{Lease: lease, Identity: c.config.ServerName, Client: client, Term: term,
			Sole: c.config.SoleServer})
		if err != nil {
			return err
		}
		e.all = append(e.all, el)
		if lease == leader.PlanesLease {
			e.planes = el
		}
		return nil
	}
	if err := add(leader.PlanesLease, func(ctx context.Context) { e.planesTerm(ctx, s, applier) }); err != nil {
		return nil, err
	}
	if !c.config.DisableControllers {
		err := add(leader.ControllersLease, func(ctx context.Context) {
			if s.planes.WaitForPlanes(ctx) == nil {
				s.controllers.Run(ctx, s.planes)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	if s.simulation != nil {
		err := add(leader.SimulationLease, func(ctx context.Context) {
			if s.planes.WaitForPlanes(ctx) != nil {
				return
			}
			if err := s.simulation.Run(ctx); err != nil {
				logrus.WithError(err).Error("workload simulation stopped")
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return e, nil
}

// planesTerm runs the plane lifecycle, the CRD conditions, the repair of
// Service address records, the Fleets and --manifests-dir until ctx is
// done. The CRD conditions start at once:
// the root plane's CRDs (Plane, Fleet) are established by them, and the
// rest waits for Planes to be served and known.
func (e *electors) planesTerm(ctx context.Context, s components, applier func() (*autoapply.Applier, error)) {
	var running sync.WaitGroup
	run := func(f func()) {
		running.Add(1)
		go func() {
			defer running.Done()
			f()
		}()
	}
	run(func() { s.planes.RunControllers(ctx) })
	run(func() { s.customResources.RunConditions(ctx) })
	if s.serviceRepair != nil {
		run(func() {
			if s.planes.WaitForPlanes(ctx) == nil {
				s.serviceRepair.Run(ctx)
			}
		})
	}
	if fleets, err := fleet.New(fleet.Config{Loopback: s.loopback, Planes: s.planes.Informer()}); err != nil {
		logrus.WithError(err).Error("fleet controller cannot start")
	} else {
		run(func() { fleets.Run(ctx) })
	}
	if applier != nil {
		if a, err := applier(); err != nil {
			logrus.WithError(err).Error("manifests directory cannot be applied")
		} else {
			pass := make(chan struct{})
			// Once root serves the Planes (manifests may create planes),
			// not once every plane is known: the applier writes through
			// the API, where a write to a plane, and the Planes' admission,
			// wait for that (a pass with nothing to write, an empty
			// directory, does not).
			run(func() {
				if waitForRootCRDs(ctx, s.customResources) == nil {
					a.Run(ctx, pass)
				}
			})
			run(func() {
				select {
				case <-pass:
					e.firstPassOnce.Do(func() { close(e.firstPass) })
				case <-ctx.Done():
				}
			})
		}
	}
	running.Wait()
}

// run starts campaigning for every Lease, until ctx is done; work waits
// for each elector to release its Lease and end its term.
func (e *electors) run(ctx context.Context, work *inProcessWork) {
	for _, el := range e.all {
		work.Go(ctx, el.Run)
	}
}

// waitForManifests returns once --manifests-dir was applied a first time
// by this server, or another server was seen to hold the plane lifecycle
// (which applies its own directory), so that a client that sees /readyz
// ok of a lone server also sees what the manifests define.
func (e *electors) waitForManifests(ctx context.Context) error {
	if e.firstPass == nil {
		return nil
	}
	_ = wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		select {
		case <-e.firstPass:
			return true, nil
		default:
		}
		holder := e.planes.Holder()
		return holder != "" && holder != e.planes.Identity(), nil
	})
	return nil
}

// leases are the electors as metrics see them.
func (e *electors) leases() []kplanemetrics.Lease {
	out := make([]kplanemetrics.Lease, len(e.all))
	for i, el := range e.all {
		out[i] = el
	}
	return out
}
