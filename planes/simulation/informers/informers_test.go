package informers

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	planestorage "kplane.dev/kplane/planes/storage"
)

// syncedInformer is a running informer that has listed nothing.
func syncedInformer(t *testing.T) cache.SharedIndexInformer {
	t.Helper()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		WatchFuncWithContext: func(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			if opts.SendInitialEvents != nil {
				// As the sources: the reflector lists instead.
				return nil, errors.New("no initial events")
			}
			return watch.NewFake(), nil
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	return inf
}

// A reset's wait for the informers ends once each informer over a storage
// it deleted in has been handed that storage's events up to the
// revision of its last deletion; storages it did not delete in are not
// waited for.
func TestAwaitRevisionsWaitsForTheStoragesDeletedIn(t *testing.T) {
	pods, services := &planestorage.Store{}, &planestorage.Store{}
	podSource, serviceSource := &source{store: pods}, &source{store: services}
	i := &Informers{stages: [][]informerSource{{
		{informer: syncedInformer(t), source: podSource},
		{informer: syncedInformer(t), source: serviceSource},
	}}}
	podSource.handedThrough("10")
	done := make(chan struct{})
	go func() {
		defer close(done)
		i.AwaitRevisions(context.Background(), map[*planestorage.Store]int64{pods: 12})
	}()
	select {
	case <-done:
		t.Fatal("the wait ended before the pods' informer was handed revision 12")
	case <-time.After(50 * time.Millisecond):
	}
	podSource.handedThrough("not a revision")
	podSource.handedThrough("13")
	podSource.handedThrough("11")
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end once the pods' informer was handed revision 13")
	}
	if got := podSource.through.Load(); got != 13 {
		t.Fatalf("through went back to %d, want 13", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		i.AwaitRevisions(ctx, map[*planestorage.Store]int64{services: 99})
	}()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end with its context")
	}
}

// The informer's watch records how far it has handed the cache's events
// on once the informer has taken them, a bookmark included: what a
// reset's wait reads.
func TestWatchRecordsWhatItHandedOn(t *testing.T) {
	src := newSource(nil, pods, nil, nil)
	inner := watch.NewFake()
	w := &planesWatch{src: src, inner: inner, result: make(chan watch.Event), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.run(ctx)
	defer w.Stop()
	go inner.Action(watch.Bookmark, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "42"}})
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Bookmark {
			t.Fatalf("the informer was handed %s, want the bookmark", ev.Type)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the bookmark did not reach the informer")
	}
	err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return src.through.Load() == 42, nil
	})
	if err != nil {
		t.Fatalf("through is %d after the bookmark at 42 was handed on", src.through.Load())
	}
}
