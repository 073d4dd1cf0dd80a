package loopback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"sync"

	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// inProcessRemoteAddr is the client address an in-process request shows
// the server (audit's source IP): the loopback interface, as before.
const inProcessRemoteAddr = "127.0.0.1:0"

// maxUnreadResponse bounds how much of a response the server may write
// ahead of its in-process reader before its writes wait, as HTTP/2's flow
// control window does over the network (x/net's client default, 4 MiB):
// a slow watcher holds up its own watch, not the server's memory.
const maxUnreadResponse = 4 << 20

// errAborted is what the reader of a response sees when its handler
// panicked (http.ErrAbortHandler included) before ending the response, as a
// reset stream would be seen over the network.
var errAborted = errors.New("the in-process server aborted the response")

// InProcess returns a copy of config whose requests handler serves in this
// process: the same handler chain (authentication, authorization, audit,
// priority and fairness, the plane filters) as the network, without TLS,
// HTTP/2 framing or a socket in between. The in-process clients (the
// planes' controllers and simulation, the plane manager) make most of a
// busy server's requests; over the network each paid TLS and HTTP/2 twice,
// once on each side. Connection upgrades (exec, port-forward) are refused:
// they need a connection, and no in-process client makes them.
func InProcess(config *restclient.Config, handler http.Handler) *restclient.Config {
	c := restclient.CopyConfig(config)
	// client-go refuses a custom transport with TLS options; nothing is
	// dialled.
	c.TLSClientConfig = restclient.TLSClientConfig{}
	c.Transport = &inProcess{handler: handler}
	return c
}

type inProcess struct{ handler http.Handler }

func (t *inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Upgrade") != "" {
		closeBody(req)
		return nil, fmt.Errorf("in-process request %s %s asks to upgrade its connection: only network clients can", req.Method, req.URL.Path)
	}
	// A fresh context, as a server request has: the caller's values (its
	// own request's user, plane or audit event when it is a handler) must
	// not leak into this request. Only its end is passed on.
	ctx, cancel := context.WithCancel(context.Background())
	w := newResponseWriter(req, cancel)
	stop := context.AfterFunc(req.Context(), func() { w.abort(req.Context().Err()) })
	go t.serve(w, serverRequest(ctx, req), stop)
	select {
	case <-w.headSent:
		return w.response()
	case <-req.Context().Done():
		w.abort(req.Context().Err())
		return nil, req.Context().Err()
	}
}

// serve runs the handler as net/http's server would: a panic ends the
// response (logged unless it is http.ErrAbortHandler), and the request
// body is closed once the handler returns.
func (t *inProcess) serve(w *responseWriter, req *http.Request, stop func() bool) {
	defer func() {
		recovered := recover()
		if recovered != nil && recovered != http.ErrAbortHandler { //nolint:errorlint // net/http compares the same way
			klog.ErrorS(nil, "Panic serving an in-process request", "method", req.Method, "path", req.URL.Path,
				"panic", recovered, "stack", string(debug.Stack()))
		}
		closeBody(req)
		if recovered != nil {
			w.finish(errAborted)
		} else {
			w.finish(nil)
		}
		stop()
	}()
	t.handler.ServeHTTP(w, req)
}

// serverRequest is req as the server sees it from the network: a path and
// query, the caller's headers, its body, ctx.
func serverRequest(ctx context.Context, req *http.Request) *http.Request {
	body, length := req.Body, req.ContentLength
	if body == nil {
		body = http.NoBody
	} else if body != http.NoBody && length == 0 {
		length = -1 // unknown, as net/http's client sends it
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	served := &http.Request{
		Method:        req.Method,
		URL:           &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery},
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        req.Header.Clone(),
		Body:          body,
		ContentLength: length,
		Host:          host,
		RemoteAddr:    inProcessRemoteAddr,
		RequestURI:    req.URL.RequestURI(),
	}
	return served.WithContext(ctx)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// responseWriter is the server's side of an in-process response and the
// buffer its reader drains: http.Flusher and http.CloseNotifier, as an
// HTTP/2 response writer is (the apiserver's filters keep what the writer
// they wrap implements).
type responseWriter struct {
	req     *http.Request
	header  http.Header
	cancel  context.CancelFunc
	gone    chan struct{} // closed when the client is gone or the handler returned
	goneOne sync.Once
	// headSent is closed once the status and headers are final.
	headSent chan struct{}

	mu   sync.Mutex
	cond sync.Cond
	// status and sent are the head as sent; status 0: not sent yet.
	status int
	sent   http.Header
	unread bytes.Buffer
	// ended: the handler returned; endErr: how (nil: a complete
	// response).
	ended  bool
	endErr error
	// clientErr: the client went away (its context ended or it closed the
	// body); the handler's writes fail and its context is cancelled.
	clientErr error
}

func newResponseWriter(req *http.Request, cancel context.CancelFunc) *responseWriter {
	w := &responseWriter{req: req, header: http.Header{}, cancel: cancel, gone: make(chan struct{}), headSent: make(chan struct{})}
	w.cond.L = &w.mu
	return w
}

func (w *responseWriter) Header() http.Header { return w.header }

func (w *responseWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeaderLocked(code)
}

func (w *responseWriter) writeHeaderLocked(code int) {
	// Informational answers are not the response: net/http sends them
	// and waits for the final one; nothing in-process wants them.
	if w.status != 0 || (code >= 100 && code < 200 && code != http.StatusSwitchingProtocols) {
		return
	}
	w.status = code
	w.sent = w.header.Clone()
	close(w.headSent)
}

func (w *responseWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status == 0 {
		if w.header.Get("Content-Type") == "" && w.header.Get("Content-Encoding") == "" && len(p) > 0 {
			w.header.Set("Content-Type", http.DetectContentType(p))
		}
		w.writeHeaderLocked(http.StatusOK)
	}
	for w.unread.Len() >= maxUnreadResponse && w.clientErr == nil {
		w.cond.Wait()
	}
	if w.clientErr != nil {
		return 0, w.clientErr
	}
	w.unread.Write(p)
	w.cond.Broadcast()
	return len(p), nil
}

// Flush sends the head if it is not yet sent; written bytes are readable
// at once.
func (w *responseWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeaderLocked(http.StatusOK)
}

// CloseNotify is the deprecated http.CloseNotifier, which the apiserver's
// timeout filter still forwards.
func (w *responseWriter) CloseNotify() <-chan bool {
	notify := make(chan bool, 1)
	go func() {
		<-w.gone
		notify <- true
	}()
	return notify
}

// finish ends the response when the handler returns: an unsent head is
// sent as net/http sends it (200 without a body), unless the handler
// aborted, in which case the round trip fails.
func (w *responseWriter) finish(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended, w.endErr = true, err
	if w.status == 0 && err == nil {
		w.header.Set("Content-Length", "0")
		w.writeHeaderLocked(http.StatusOK)
	}
	w.cond.Broadcast()
	if w.status == 0 {
		close(w.headSent)
	}
	// Nothing is served any more: CloseNotify's waiters end.
	w.goneOne.Do(func() { close(w.gone) })
}

// abort records that the client went away and cancels the handler's
// context, as a closed connection or stream does.
func (w *responseWriter) abort(err error) {
	w.mu.Lock()
	if w.clientErr == nil {
		w.clientErr = err
	}
	w.cond.Broadcast()
	w.mu.Unlock()
	w.goneOne.Do(func() { close(w.gone) })
	w.cancel()
}

// response is the client's view once the head is sent (or the handler
// aborted before sending it).
func (w *responseWriter) response() (*http.Response, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status == 0 {
		return nil, fmt.Errorf("%s %s: %w", w.req.Method, w.req.URL.Path, w.endErr)
	}
	length := int64(-1)
	if n, err := strconv.ParseInt(w.sent.Get("Content-Length"), 10, 64); err == nil {
		length = n
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		StatusCode:    w.status,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        w.sent,
		Body:          &responseBody{w: w},
		ContentLength: length,
		Request:       w.req,
	}, nil
}

// responseBody is the client's reader of the response.
type responseBody struct{ w *responseWriter }

func (b *responseBody) Read(p []byte) (int, error) {
	w := b.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.unread.Len() == 0 && !w.ended && w.clientErr == nil {
		w.cond.Wait()
	}
	if w.clientErr != nil {
		return 0, w.clientErr
	}
	if w.unread.Len() > 0 {
		n, _ := w.unread.Read(p)
		w.cond.Broadcast()
		return n, nil
	}
	if w.endErr != nil {
		return 0, w.endErr
	}
	return 0, io.EOF
}

// Close ends the client's interest: a handler still writing (a watch) sees
// its context cancelled, as when a stream is reset.
func (b *responseBody) Close() error {
	b.w.abort(errClosedBody)
	return nil
}

var errClosedBody = errors.New("read on a closed in-process response body")
