package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kplane.dev/kplane/test/e2e/framework"
)

// SIGTERM while clients write into several planes and watch them: the
// server drains and exits 0 with a clean log, and every write it
// acknowledged is there after a restart. What the shutdown cuts short
// (closing the in-process clients' connections, ending the datastore's
// watches first) must never cut a request the server had accepted.
func TestShutdownUnderLoadDrains(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{})
	const writers = 8
	plane := func(i int) string { return uniquePlane(t, fmt.Sprintf("drain-%d", i)) }
	planes := make([]string, writers)
	for i := range planes {
		planes[i] = plane(i)
		// The plane exists and a watch is open on it when SIGTERM comes.
		w, err := s.Client(t, planes[i]).CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
	}

	var mu sync.Mutex
	acked := map[string][]string{}
	written := make(chan struct{}, writers*10)
	var wg sync.WaitGroup
	for i := range writers {
		client := s.Client(t, planes[i]).CoreV1().ConfigMaps("default")
		wg.Go(func() {
			for j := 0; ; j++ {
				name := fmt.Sprintf("cm-%d", j)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
				cancel()
				if err != nil {
					return // the server stopped accepting requests
				}
				mu.Lock()
				acked[planes[i]] = append(acked[planes[i]], name)
				mu.Unlock()
				select {
				case written <- struct{}{}:
				default:
				}
			}
		})
	}
	// SIGTERM once every writer is under way.
	for range writers * 10 {
		<-written
	}
	s.Stop()
	wg.Wait()
	if code := s.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM under load", code)
	}
	checkCleanShutdownLog(t, s.Log())

	s.Restart(t)
	total := 0
	for _, p := range planes {
		list, err := s.Client(t, p).CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, cm := range list.Items {
			have[cm.Name] = true
		}
		for _, name := range acked[p] {
			if !have[name] {
				t.Errorf("plane %s: acknowledged configmap %s is gone after the restart", p, name)
			}
		}
		total += len(acked[p])
	}
	t.Logf("%d acknowledged writes across %d planes, all there after the restart", total, writers)
}

// A graceful stop ends the server's in-process work while the server
// still serves it: the work's last writes, the release of the sole
// server's Leases, are answered (200), and no in-process request is refused
// as "apiserver is shutting down" (upstream refuses requests once it has
// stopped accepting them, and work stopped only then raced the listener's
// close). The server logs every request at -v 3.
func TestStopEndsInProcessWorkFirst(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{Args: []string{"-v", "3"}})
	framework.Eventually(t, 30*time.Second, "every Lease names the server", func(ctx context.Context) error {
		for _, name := range controllerLeases {
			if holder, err := leaseHolder(ctx, s, t, name); err != nil || holder == "" {
				return fmt.Errorf("lease %s held by %q (%v)", name, holder, err)
			}
		}
		return nil
	})
	logBefore := len(s.Log())
	s.Stop()
	if code := s.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	log := s.Log()[logBefore:]
	checkCleanShutdownLog(t, log)
	if strings.Contains(log, "apiserver is shutting down") {
		t.Errorf("a request was refused during the stop:\n%s", linesWith(log, "apiserver is shutting down"))
	}
	// Every in-process informer has stopped before the pre-shutdown hooks
	// complete: one still running re-watches when the stop ends its watch,
	// and is refused as above if the server has stopped accepting by then
	// (upstream's cluster authentication trust controller did, now and then).
	const hooksDone = "pre-shutdown hooks completed"
	if at := strings.Index(log, hooksDone); at < 0 {
		t.Errorf("the log does not say %q", hooksDone)
	} else if late := linesWith(log[at:], "Stopping reflector"); late != "" {
		t.Errorf("in-process informers stopped after the pre-shutdown hooks:\n%s", late)
	}
	for _, name := range controllerLeases {
		released := false
		for _, line := range strings.Split(linesWith(log, "/leases/"+name+" "), "\n") {
			if strings.Contains(line, "verb=PUT") && strings.Contains(line, "resp=200") {
				released = true
			}
		}
		if !released {
			t.Errorf("Lease %s was not released (no PUT answered 200 during the stop):\n%s", name, linesWith(log, "/leases/"+name))
		}
	}
}

// linesWith are the lines of log that contain s.
func linesWith(log, s string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
