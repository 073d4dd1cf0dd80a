package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kplane.dev/kplane/test/e2e/framework"
)

// snapshotStream is an open delta stream.
type snapshotStream struct {
	resp   *http.Response
	lines  *bufio.Scanner
	cancel context.CancelFunc
	opened time.Time
}

// close ends the stream from the client's side.
func (s *snapshotStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads the stream's next event; io.EOF when the server ended it.
func (s *snapshotStream) next() (streamEvent, error) {
	if !s.lines.Scan() {
		if err := s.lines.Err(); err != nil {
			return streamEvent{}, err
		}
		return streamEvent{}, io.EOF
	}
	var ev streamEvent
	if err := json.Unmarshal(s.lines.Bytes(), &ev); err != nil {
		return ev, fmt.Errorf("line %q: %w", s.lines.Text(), err)
	}
	return ev, nil
}

// nextWithin is next, failing the test when nothing comes in d.
func (s *snapshotStream) nextWithin(t *testing.T, d time.Duration) streamEvent {
	t.Helper()
	type result struct {
		ev  streamEvent
		err error
	}
	got := make(chan result, 1)
	go func() {
		ev, err := s.next()
		got <- result{ev, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("reading the stream: %v", r.err)
		}
		return r.ev
	case <-time.After(d):
		s.close()
		t.Fatalf("no line of the stream within %s", d)
		return streamEvent{}
	}
}

// streamRequest sends GET /snapshot?watch=true&query to plane as the admin,
// or as user (in groups) when user is set. On 200 the stream is returned
// open; otherwise its status, body and Retry-After header. A request that
// gets no answer fails the test.
func streamRequest(t *testing.T, s *framework.Server, client *http.Client, plane, query, user string, groups ...string) (*snapshotStream, int, []byte, string) {
	t.Helper()
	st, code, body, retryAfter, err := sendStreamRequest(s, client, plane, query, user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return st, code, body, retryAfter
}

// sendStreamRequest is streamRequest for any goroutine.
func sendStreamRequest(s *framework.Server, client *http.Client, plane, query, user string, groups ...string) (*snapshotStream, int, []byte, string, error) {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.PlaneURL(plane)+"/snapshot?watch=true&"+query, nil)
	if err != nil {
		cancel()
		return nil, 0, nil, "", err
	}
	req.Header.Set("Authorization", "Bearer "+s.AdminToken())
	if user != "" {
		req.Header.Set("Impersonate-User", user)
		for _, g := range groups {
			req.Header.Add("Impersonate-Group", g)
		}
	}
	opened := time.Now()
	// A stream's headers come at once; one that never sends them fails the
	// test instead of hanging it.
	unanswered := time.AfterFunc(framework.DefaultTimeout, cancel)
	resp, err := client.Do(req)
	if !unanswered.Stop() {
		err = fmt.Errorf("no answer within %s (%v)", framework.DefaultTimeout, err)
	}
	if err != nil {
		cancel()
		return nil, 0, nil, "", fmt.Errorf("opening a stream of %s: %w", plane, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return nil, resp.StatusCode, body, resp.Header.Get("Retry-After"), nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	return &snapshotStream{resp: resp, lines: sc, cancel: cancel, opened: opened}, http.StatusOK, nil, "", nil
}

// streamClient never times out a response: streams last.
func streamClient(s *framework.Server) *http.Client {
	c := s.HTTPClient()
	c.Timeout = 0
	return c
}

func mustStream(t *testing.T, s *framework.Server, client *http.Client, plane, query string) *snapshotStream {
	t.Helper()
	st, code, body, _ := streamRequest(t, s, client, plane, query, "")
	if code != http.StatusOK {
		t.Fatalf("stream of %s?%s: %d %s", plane, query, code, body)
	}
	t.Cleanup(st.close)
	return st
}

// TestSnapshotStreamLimits: past the per-identity limit a stream is
// refused at once with a 429 Status and Retry-After; the same user name in
// another plane is another identity; past the server-wide limit streams
// are refused too; a stream that ends frees its slot. A stream without
// timeoutSeconds, or with a longer one, ends at the server's maximum.
func TestSnapshotStreamLimits(t *testing.T) {
	t.Parallel()
	s := framework.StartServer(t, framework.Options{Args: []string{
		"--snapshot-max-streams-per-user", "3", "--snapshot-max-streams", "5", "--snapshot-max-stream-timeout", "30s",
	}})
	client := streamClient(s)
	const query = "resource=configmaps"

	t.Run("limits", func(t *testing.T) {
		var inA []*snapshotStream
		for i := 0; i < 3; i++ {
			inA = append(inA, mustStream(t, s, client, "limits-a", query))
		}
		began := time.Now()
		_, code, body, retryAfter := streamRequest(t, s, client, "limits-a", query, "")
		wantStatus(t, code, body, http.StatusTooManyRequests, "too many delta streams", "kplane-admin", "limits-a")
		if took := time.Since(began); took > 5*time.Second {
			t.Fatalf("the refusal took %s", took)
		}
		if retryAfter == "" {
			t.Fatal("429 without Retry-After")
		}

		// Another plane: the admin is another identity there, until the
		// server-wide limit (5) is reached.
		mustStream(t, s, client, "limits-b", query)
		mustStream(t, s, client, "limits-b", query)
		_, code, body, _ = streamRequest(t, s, client, "limits-b", query, "")
		wantStatus(t, code, body, http.StatusTooManyRequests, "the server holds 5")

		// A stream the client closes frees its slot.
		inA[0].close()
		framework.Eventually(t, framework.DefaultTimeout, "the slot of a closed stream is freed", func(context.Context) error {
			return openOrRefused(t, s, client, "limits-a", query, func(st *snapshotStream) { st.close() })
		})
	})

	t.Run("server maximum timeout", func(t *testing.T) {
		// The streams of "limits" are closed by now (their cleanups ran);
		// wait until the server has counted them out.
		var streams []*snapshotStream
		framework.Eventually(t, framework.DefaultTimeout, "the streams of the last subtest are counted out", func(context.Context) error {
			return openOrRefused(t, s, client, "limits-c", query+"&timeoutSeconds=3600", func(st *snapshotStream) {
				t.Cleanup(st.close)
				streams = append(streams, st)
			})
		})
		streams = append(streams, mustStream(t, s, client, "limits-c", query))
		var wg sync.WaitGroup
		for i, st := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := readToEnd(st, 3*framework.DefaultTimeout); err != nil {
					t.Errorf("stream %d: %v", i, err)
					return
				}
				if took := time.Since(st.opened); took < 25*time.Second || took > 30*time.Second+2*framework.DefaultTimeout {
					t.Errorf("stream %d ended after %s, want the server's maximum (30s)", i, took)
				}
			}()
		}
		wg.Wait()
	})
}

// openOrRefused opens a stream as the admin and hands it to opened; a 429
// is an error to wait on, any other answer stops the wait.
func openOrRefused(t *testing.T, s *framework.Server, client *http.Client, plane, query string, opened func(*snapshotStream)) error {
	st, code, body, _ := streamRequest(t, s, client, plane, query, "")
	switch code {
	case http.StatusOK:
		opened(st)
		return nil
	case http.StatusTooManyRequests:
		return fmt.Errorf("still refused: %s", body)
	}
	return framework.Stop(fmt.Errorf("%d %s", code, body))
}

// readToEnd reads st until the server ends it cleanly; an error if it
// fails or lasts longer than limit.
func readToEnd(st *snapshotStream, limit time.Duration) error {
	done := make(chan error, 1)
	go func() {
		for {
			ev, err := st.next()
			if errors.Is(err, io.EOF) {
				done <- nil
				return
			}
			if err != nil {
				done <- err
				return
			}
			if ev.Type == "ERROR" {
				done <- fmt.Errorf("ERROR event: %v", ev.Object)
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		st.close()
		return fmt.Errorf("still open after %s", limit)
	}
}

// TestSnapshotStreamTimeoutSeconds: a stream ends cleanly (the response
// completes) once its timeoutSeconds are over.
func TestSnapshotStreamTimeoutSeconds(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "stream-timeout")
	st := mustStream(t, shared, streamClient(shared), plane, "resource=configmaps&timeoutSeconds=2")
	if err := readToEnd(st, framework.DefaultTimeout); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(st.opened); took < 1500*time.Millisecond {
		t.Fatalf("a stream of 2 seconds ended after %s", took)
	}
}

// TestSnapshotStreamInitialEventsAtOnce: a stream without resourceVersion
// and without timeoutSeconds sends the current state at once, not when it
// ends. The state is small (a few hundred bytes): unless the server
// flushes it, it stays in the connection's write buffer.
func TestSnapshotStreamInitialEventsAtOnce(t *testing.T) {
	t.Parallel()
	plane := uniquePlane(t, "stream-initial")
	c := shared.Client(t, plane)
	if _, err := c.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "present"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st := mustStream(t, shared, streamClient(shared), plane, "resource=configmaps&namespace=default")
	deadline := time.Now().Add(framework.DefaultTimeout / 2)
	for {
		ev := st.nextWithin(t, time.Until(deadline))
		if ev.Type != "ADDED" {
			t.Fatalf("the stream began with %s, want the state as ADDED events", ev.Type)
		}
		if ev.Resource == "configmaps" && objectName(ev.Object) == "default/present" {
			return
		}
	}
}

// TestSnapshotStreamsShareOnePlane: 200 streams of one plane (four users,
// 50 each) all receive a change made after they opened.
func TestSnapshotStreamsShareOnePlane(t *testing.T) {
	t.Parallel()
	const users, perUser = 4, 50
	plane := uniquePlane(t, "stream-many")
	shared.MustKubectl(t, plane, `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: stream-configmaps}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: stream-configmaps}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: stream-configmaps}
subjects: [{kind: Group, name: streamers, apiGroup: rbac.authorization.k8s.io}]
`, "apply", "-f", "-")
	client := streamClient(shared)
	const query = "resource=configmaps&namespace=default"
	// RBAC reads from the caches: the binding counts once they have it.
	framework.Eventually(t, framework.DefaultTimeout, "the streamers get a stream", func(context.Context) error {
		st, code, body, _ := streamRequest(t, shared, client, plane, query, "streamer-0", "streamers")
		if st == nil {
			return fmt.Errorf("%d %s", code, body)
		}
		st.close()
		return nil
	})

	streams := make([]*snapshotStream, 0, users*perUser)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for u := 0; u < users; u++ {
		for i := 0; i < perUser; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, code, body, _, err := sendStreamRequest(shared, client, plane, query, fmt.Sprintf("streamer-%d", u), "streamers")
				if err != nil || code != http.StatusOK {
					t.Errorf("stream %d of streamer-%d: %v %d %s", i, u, err, code, body)
					return
				}
				mu.Lock()
				streams = append(streams, st)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for _, st := range streams {
		t.Cleanup(st.close)
	}
	if t.Failed() {
		t.FailNow()
	}

	if _, err := shared.Client(t, plane).CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "after-open"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var received atomic.Int32
	var failures []string
	var failMu sync.Mutex
	for _, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := readUntil(st, 2*framework.DefaultTimeout, func(ev streamEvent) bool {
				return ev.Type == "ADDED" && objectName(ev.Object) == "default/after-open"
			})
			if err != nil {
				failMu.Lock()
				failures = append(failures, err.Error())
				failMu.Unlock()
				return
			}
			received.Add(1)
		}()
	}
	wg.Wait()
	if int(received.Load()) != len(streams) {
		t.Fatalf("%d of %d streams received the change; first failures: %s", received.Load(), len(streams),
			strings.Join(failures[:min(len(failures), 3)], "; "))
	}
}

// readUntil reads st until found says yes; an error if the stream ends,
// fails, or nothing is found within limit.
func readUntil(st *snapshotStream, limit time.Duration, found func(streamEvent) bool) error {
	done := make(chan error, 1)
	go func() {
		for {
			ev, err := st.next()
			if err != nil {
				done <- err
				return
			}
			if ev.Type == "ERROR" {
				done <- fmt.Errorf("ERROR event: %v", ev.Object)
				return
			}
			if found(ev) {
				done <- nil
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		st.close()
		return fmt.Errorf("not found within %s", limit)
	}
}
