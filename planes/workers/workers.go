// Package workers runs the worker loop of kplane's queue-driven
// controllers: take a key, sync it, forget it or put it back rate-limited.
// Every shared controller serves all planes from one queue, so the loop is
// the same everywhere and lives here once.
package workers

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
)

// Run starts n workers that sync the keys of queue until ctx is done, then
// shuts the queue down. A key whose sync fails is retried after the
// queue's rate limit; the failure is logged at debug level under what.
func Run[T comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[T], n int, what string,
	sync func(context.Context, T) error,
) {
	defer utilruntime.HandleCrash()
	defer queue.ShutDown()
	for i := 0; i < n; i++ {
		go wait.UntilWithContext(ctx, func(ctx context.Context) { process(ctx, queue, what, sync) }, time.Second)
	}
	<-ctx.Done()
}

// process works until the queue shuts down.
func process[T comparable](ctx context.Context, queue workqueue.TypedRateLimitingInterface[T], what string,
	sync func(context.Context, T) error,
) {
	for {
		key, quit := queue.Get()
		if quit {
			return
		}
		err := sync(ctx, key)
		queue.Done(key)
		if err == nil {
			queue.Forget(key)
			continue
		}
		logrus.WithError(err).WithField(what, key).Debugf("%s sync retries", what)
		queue.AddRateLimited(key)
	}
}
