package apiserver

import (
	"context"
	"testing"
	"time"
)

// Stop ends the contexts of running work, waits for the work to return,
// and work started after it runs with a context already done.
func TestInProcessWorkStopWaitsForTheWork(t *testing.T) {
	w := newInProcessWork()
	hook, cancelHook := context.WithCancel(context.Background())
	defer cancelHook()
	returned := make(chan struct{})
	w.Go(hook, func(ctx context.Context) {
		<-ctx.Done()
		// The last writes of the work happen here, before Stop returns.
		time.Sleep(50 * time.Millisecond)
		close(returned)
	})
	inDo := make(chan struct{})
	doReturned := make(chan error, 1)
	go func() {
		doReturned <- w.Do(hook, func(ctx context.Context) error {
			close(inDo)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	<-inDo

	w.Stop(time.Minute)
	select {
	case <-returned:
	default:
		t.Fatal("Stop returned before the work did")
	}
	if err := <-doReturned; err != context.Canceled {
		t.Fatalf("Do's context ended with %v, want context.Canceled", err)
	}
	if hook.Err() != nil {
		t.Fatal("stopping the work ended the hook's context")
	}

	err := w.Do(hook, func(ctx context.Context) error { return ctx.Err() })
	if err != context.Canceled {
		t.Fatalf("Do after Stop ran with a live context (%v)", err)
	}
	ran := make(chan error, 1)
	w.Go(hook, func(ctx context.Context) { ran <- ctx.Err() })
	if err := <-ran; err != context.Canceled {
		t.Fatalf("Go after Stop ran with a live context (%v)", err)
	}
}

// A function that returns while the work runs leaves the others running,
// and work that never returns does not hold Stop past its bound.
func TestInProcessWorkStopIsBounded(t *testing.T) {
	w := newInProcessWork()
	if err := w.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	running := make(chan error, 1)
	w.Go(context.Background(), func(ctx context.Context) { running <- ctx.Err() })
	if err := <-running; err != nil {
		t.Fatal("the work's context ended when an earlier Do returned")
	}
	hang := make(chan struct{})
	defer close(hang)
	w.Go(context.Background(), func(context.Context) { <-hang })
	stopped := make(chan struct{})
	go func() {
		w.Stop(10 * time.Millisecond)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("Stop waited past its bound for work that does not return")
	}
}
