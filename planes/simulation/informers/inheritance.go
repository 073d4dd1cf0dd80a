package informers

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/wait"
)

// inheritTimeout bounds the wait for one informer to take a plane's
// inherited objects; past it the next stage goes on regardless.
const inheritTimeout = 10 * time.Second

// runInheritance gives the informers the objects of each queued plane's
// template, one plane and one stage at a time.
func (i *Informers) runInheritance(ctx context.Context) {
	for {
		plane, shutdown := i.inheriting.Get()
		if shutdown {
			return
		}
		i.inherit(ctx, plane)
		i.inheriting.Done(plane)
	}
}

// inherit brings every informer's view of plane to what it inherits now.
// A plane that gains objects gets them stage by stage, each once the
// stage before is in the informers' stores; one that loses them (it is
// being deleted) loses the later stages first, so that no controller
// makes again what is going away.
func (i *Informers) inherit(ctx context.Context, plane string) {
	stages := i.stages
	if i.templates == nil {
		return
	}
	if i.templates.Inherits(plane) == "" {
		stages = make([][]informerSource, len(i.stages))
		for n, stage := range i.stages {
			stages[len(i.stages)-1-n] = stage
		}
	}
	for _, stage := range stages {
		answers := make([]<-chan expectation, len(stage))
		for n, is := range stage {
			answers[n] = is.source.inherit(plane)
		}
		for n, is := range stage {
			var expect expectation
			select {
			case expect = <-answers[n]:
			case <-ctx.Done():
				return
			}
			if err := awaitStore(ctx, is, expect); err != nil && ctx.Err() == nil {
				logrus.WithError(err).Warnf("simulation: the %s informer did not take what plane %s inherits within %s",
					is.source.store.Resource(), plane, inheritTimeout)
			}
		}
	}
}

// awaitStore waits until the informer's store holds what expect says.
// The informer takes the events a moment after the source sends them;
// nothing tells when, so its store is looked at until it does.
func awaitStore(ctx context.Context, is informerSource, expect expectation) error {
	store := is.informer.GetStore()
	return wait.PollUntilContextTimeout(ctx, time.Millisecond, inheritTimeout, true, func(context.Context) (bool, error) {
		for key, present := range expect {
			if _, exists, _ := store.GetByKey(key); exists != present {
				return false, nil
			}
		}
		return true, nil
	})
}
