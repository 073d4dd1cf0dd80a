package planeclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/planes/loopback"
)

// eventServer records the Events it is sent, by plane, in order, and
// answers none until release is closed.
type eventServer struct {
	release chan struct{}
	mu      sync.Mutex
	written []string // "<plane>/<event name>"
	// pinned are the reset revisions the Events were sent with, in order.
	pinned []string
}

func (s *eventServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	<-s.release
	var ev corev1.Event
	data, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(data, &ev)
	plane := strings.Split(strings.TrimPrefix(r.URL.Path, "/clusters/"), "/")[0]
	s.mu.Lock()
	s.written = append(s.written, plane+"/"+ev.Name)
	s.pinned = append(s.pinned, r.Header.Get(lifecycle.ResetRevisionHeader))
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(data)
}

func (s *eventServer) writes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.written...)
}

// startEventWriter runs an Events writer whose API, an eventServer,
// answers nothing until release is called (at the latest when the test
// ends, before the server is closed: Close waits for the requests it
// holds).
func startEventWriter(t *testing.T) (*eventServer, *httptest.Server, func(), *Events) {
	t.Helper()
	api := &eventServer{release: make(chan struct{})}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	var once sync.Once
	release := func() { once.Do(func() { close(api.release) }) }
	t.Cleanup(release)
	events := NewEvents()
	go events.Run(t.Context(), 1)
	if err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return events.running.Load(), nil
	}); err != nil {
		t.Fatal("the writer never ran")
	}
	return api, srv, release, events
}

// A plane that floods Events while the API is slow loses only its own
// newest ones; another plane's Events are written, soon after, and each
// plane's in the order they were made. Every create answers at once.
func TestEventsOfAQuietPlaneOutliveAFlood(t *testing.T) {
	ctx := t.Context()
	api, srv, release, events := startEventWriter(t)
	// No client-side rate limit: the creates come as fast as they can.
	client := kubernetes.NewForConfigOrDie(Config(loopback.Routed(&rest.Config{Host: srv.URL, QPS: -1}), events, nil))
	create := func(plane string, i int) {
		t.Helper()
		ns := plane + "|default"
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e%03d", i), Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web"}, Reason: "Scheduled"}
		got, err := client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
		if err != nil || got.Name != ev.Name || got.Namespace != ns {
			t.Fatalf("creating event %s of %s: %v, answered %+v", ev.Name, plane, err, got)
		}
	}
	const flood = maxPendingPerPlane + 44
	for i := range flood {
		create("noisy", i)
	}
	for i := range 3 {
		create("quiet", i)
	}
	if d := events.Dropped(); d < flood-maxPendingPerPlane-eventsPerTurn || d > flood-maxPendingPerPlane {
		t.Fatalf("%d of the noisy plane's events dropped, want those past its %d waiting", d, maxPendingPerPlane)
	}
	release()
	written := func() []string { return api.writes() }
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(written()) == flood-int(events.Dropped())+3, nil
	}); err != nil {
		t.Fatalf("%d events written, want %d", len(written()), flood-int(events.Dropped())+3)
	}
	var quietAt []int
	last := -1
	for i, w := range written() {
		plane, name, _ := strings.Cut(w, "/")
		if plane == "quiet" {
			quietAt = append(quietAt, i)
			continue
		}
		var n int
		_, _ = fmt.Sscanf(name, "e%d", &n)
		if n <= last {
			t.Fatalf("the noisy plane's events were written out of order: %s after e%03d", name, last)
		}
		last = n
	}
	if len(quietAt) != 3 || quietAt[2] > 2*eventsPerTurn+3 {
		t.Fatalf("the quiet plane's events were written at %v of %d, want all three among the first turns", quietAt, len(written()))
	}
}

func TestEventCreates(t *testing.T) {
	for req, want := range map[string]bool{
		"POST /api/v1/namespaces/default/events":                      true,
		"POST /apis/events.k8s.io/v1/namespaces/default/events":       true,
		"PATCH /api/v1/namespaces/default/events/web.1":               false,
		"POST /api/v1/namespaces/events/pods":                         false,
		"POST /apis/example.com/v1/namespaces/default/events":         false,
		"POST /api/v1/namespaces":                                     false,
		"POST /apis/events.k8s.io/v1/namespaces/default/events/extra": false,
	} {
		method, path, _ := strings.Cut(req, " ")
		r, _ := http.NewRequest(method, "https://x"+path, nil)
		if got := isEventCreate(r); got != want {
			t.Errorf("isEventCreate(%s) = %v, want %v", req, got, want)
		}
	}
}

// An Event waiting to be written when its plane is reset carries the
// plane's reset revision from when it was made: the API refuses it after
// the reset (lifecycle.ResetRevisionHeader) instead of adding the story
// of objects the reset took away to the plane it returned.
func TestQueuedEventsCarryTheResetRevisionTheyWereMadeAt(t *testing.T) {
	ctx := t.Context()
	api, srv, release, events := startEventWriter(t)
	var revision atomic.Uint64
	revision.Store(7)
	resets := func(plane string) uint64 { return revision.Load() }
	client := kubernetes.NewForConfigOrDie(Config(loopback.Routed(&rest.Config{Host: srv.URL, QPS: -1}), events, resets))
	ns := "p|default"
	for _, name := range []string{"before", "queued"} {
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web"}, Reason: "Scheduled"}
		if _, err := client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The plane is reset while both wait to be written.
	revision.Store(9)
	release()
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(api.writes()) == 2, nil
	}); err != nil {
		t.Fatalf("events written: %v", api.writes())
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	for i, pinned := range api.pinned {
		if pinned != "7" {
			t.Errorf("event %s sent with reset revision %q, want the one it was made at, 7", api.written[i], pinned)
		}
	}
}
