package loopback

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	restclient "k8s.io/client-go/rest"
)

const testTimeout = 10 * time.Second

type callerKey struct{}

func inProcessClient(t *testing.T, handler http.Handler, token string) *http.Client {
	t.Helper()
	config := InProcess(&restclient.Config{Host: "https://127.0.0.1:6443", BearerToken: token,
		TLSClientConfig: restclient.TLSClientConfig{CAData: []byte("unused")}}, handler)
	client, err := restclient.HTTPClientFor(config)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// A request reaches the handler as the server sees one from the network
// (path, query, headers, body, the client's credentials) in a context of
// its own, and its answer comes back whole.
func TestInProcessRoundTrip(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if req.Context().Value(callerKey{}) != nil {
			http.Error(w, "the caller's context leaked into the request", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Seen", strings.Join([]string{req.Method, req.RequestURI, req.Header.Get("Authorization"), string(body), req.RemoteAddr}, " "))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	client := inProcessClient(t, handler, "secret")
	ctx := context.WithValue(context.Background(), callerKey{}, "outer request")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://127.0.0.1:6443/api/v1/namespaces?dryRun=All", strings.NewReader(`{"a":1}`))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || string(body) != `{"ok":true}` {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if want := `POST /api/v1/namespaces?dryRun=All Bearer secret {"a":1} ` + inProcessRemoteAddr; resp.Header.Get("X-Seen") != want {
		t.Errorf("the handler saw %q, want %q", resp.Header.Get("X-Seen"), want)
	}
}

// A streamed answer (a watch) is readable as it is flushed, and closing
// its body ends the handler's context, as a reset stream does.
func TestInProcessStreamEndsWithItsReader(t *testing.T) {
	ended := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		defer close(ended)
		_, _ = w.Write([]byte("event 1\n"))
		w.(http.Flusher).Flush()
		<-req.Context().Done()
	})
	resp, err := inProcessClient(t, handler, "").Get("https://127.0.0.1:6443/api/v1/pods?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event 1\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	resp.Body.Close()
	select {
	case <-ended:
	case <-time.After(testTimeout):
		t.Fatal("the handler still runs after its reader closed the body")
	}
}

// A caller that gives up before the answer's head ends the handler's
// context and gets its context's error.
func TestInProcessCallerCancels(t *testing.T) {
	ended := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		defer close(ended)
		<-req.Context().Done()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:6443/healthz", nil)
	if _, err := inProcessClient(t, handler, "").Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the deadline", err)
	}
	select {
	case <-ended:
	case <-time.After(testTimeout):
		t.Fatal("the handler still runs after its caller gave up")
	}
}

// A handler that aborts (as the timeout filter does, with
// http.ErrAbortHandler) fails the round trip before its head, and the read
// of its body after it; the process goes on.
func TestInProcessAbortedHandler(t *testing.T) {
	client := inProcessClient(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }), "")
	if _, err := client.Get("https://127.0.0.1:6443/x"); !errors.Is(err, errAborted) {
		t.Errorf("got %v, want the abort", err)
	}
	client = inProcessClient(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("partial"))
		panic("boom")
	}), "")
	resp, err := client.Get("https://127.0.0.1:6443/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, errAborted) {
		t.Errorf("got %v reading the body, want the abort", err)
	}
}

// The server writes at most maxUnreadResponse ahead of its reader, then
// waits for it; everything written is read, in order.
func TestInProcessWriterWaitsForItsReader(t *testing.T) {
	const chunk = 64 << 10
	written := make(chan int, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := 0
		for n < 2*maxUnreadResponse {
			k, err := w.Write([]byte(strings.Repeat("x", chunk)))
			n += k
			if err != nil {
				break
			}
		}
		written <- n
	})
	resp, err := inProcessClient(t, handler, "").Get("https://127.0.0.1:6443/big")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	select {
	case n := <-written:
		t.Fatalf("the handler wrote %d bytes with nobody reading", n)
	case <-time.After(100 * time.Millisecond):
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || len(body) != 2*maxUnreadResponse {
		t.Fatalf("read %d bytes, %v; want %d", len(body), err, 2*maxUnreadResponse)
	}
}

// A handler that writes nothing answers 200 with an empty body; an
// upgrade is refused with a reason.
func TestInProcessEmptyAnswerAndUpgrade(t *testing.T) {
	client := inProcessClient(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), "")
	resp, err := client.Get("https://127.0.0.1:6443/empty")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.ContentLength != 0 {
		t.Errorf("got %d, %d bytes, length %d", resp.StatusCode, len(body), resp.ContentLength)
	}
	req, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1:6443/api/v1/namespaces/a/pods/b/exec", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	if _, err := client.Do(req); err == nil || !strings.Contains(err.Error(), "upgrade") {
		t.Errorf("got %v, want the upgrade refused", err)
	}
}
