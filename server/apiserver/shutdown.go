package apiserver

import (
	"net"
	"net/http"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// loopbackHangUpTimeout bounds how long the closing listener waits for the
// in-process clients' requests to end. They end within milliseconds (their
// clients are stopping); past it the shutdown goes on as net/http's.
const loopbackHangUpTimeout = 500 * time.Millisecond

// loopbackHangUpPoll is how often the closing listener looks again.
const loopbackHangUpPoll = 2 * time.Millisecond

// loopbackHangUp is the serving listener, which hangs up the in-process
// clients' (loopback) connections when it is closed, before the server's
// GOAWAY: see Close.
type loopbackHangUp struct {
	net.Listener
	loopback *rest.Config
	once     sync.Once

	mu sync.Mutex
	// conns are the open accepted connections by remote address.
	conns map[string]*trackedConn
}

// hangUpLoopbackOnClose returns listener, which closes the connections of
// the in-process clients (loopback) once it is closed itself; Filter marks
// them. Without a listener or a loopback configuration there is nothing to
// hang up (nil).
func hangUpLoopbackOnClose(listener net.Listener, loopback *rest.Config) *loopbackHangUp {
	if listener == nil || loopback == nil {
		return nil
	}
	return &loopbackHangUp{Listener: listener, loopback: loopback, conns: map[string]*trackedConn{}}
}

// Accept tracks the accepted connection. It hides the *net.TCPConn from
// the apiserver's keep-alive listener above it, which changes nothing:
// net's listener has already enabled keep-alive on it.
func (l *loopbackHangUp) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tracked := &trackedConn{Conn: conn, owner: l, key: conn.RemoteAddr().String()}
	l.mu.Lock()
	l.conns[tracked.key] = tracked
	l.mu.Unlock()
	return tracked, nil
}

// Filter marks the connection of each request of an in-process client
// (which names the loopback server name in its TLS handshake).
func (l *loopbackHangUp) Filter(next http.Handler) http.Handler {
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.TLS != nil && req.TLS.ServerName == genericapiserver.LoopbackClientServerNameOverride {
			l.markInProcess(req.RemoteAddr)
		}
		next.ServeHTTP(w, req)
	})
}

func (l *loopbackHangUp) markInProcess(remote string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.conns[remote]; ok {
		c.inProcess = true
	}
}

// Close closes the listener, then the in-process clients' connections as
// soon as their requests have ended, before it returns.
//
// The in-process clients (controllers, informers, the plane manager,
// admission) share one HTTP/2 connection to the server. At shutdown
// net/http closes the listener, then sends GOAWAY on every connection and
// waits until each is closed. A client closes its connection after a
// GOAWAY only when a stream on it ends: a connection idle when the GOAWAY
// arrives stays open until the server gives up on it after one second
// (x/net/http2's goAwayTimeout). The in-process clients stop as the server
// does, so their last requests end around the moment the listener closes,
// and often just before the GOAWAY. Here, while the GOAWAY waits for Close
// to return, the idle in-process connections are closed by their client
// (the transport every in-process client shares) as soon as they are idle,
// up to loopbackHangUpTimeout; a connection still busy then drains as
// net/http's shutdown has it. No new connection can be opened once the
// listener is closed.
func (l *loopbackHangUp) Close() error {
	err := l.Listener.Close()
	l.once.Do(l.hangUpLoopback)
	return err
}

func (l *loopbackHangUp) hangUpLoopback() {
	transport, err := rest.TransportFor(l.loopback)
	if err != nil {
		klog.ErrorS(err, "Closing idle loopback connections at shutdown")
		return
	}
	deadline := time.Now().Add(loopbackHangUpTimeout)
	for {
		utilnet.CloseIdleConnectionsFor(transport)
		if !l.inProcessOpen() || time.Now().After(deadline) {
			return
		}
		time.Sleep(loopbackHangUpPoll)
	}
}

// inProcessOpen reports whether a connection of an in-process client is
// open.
func (l *loopbackHangUp) inProcessOpen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		if c.inProcess {
			return true
		}
	}
	return false
}

func (l *loopbackHangUp) forget(c *trackedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns[c.key] == c {
		delete(l.conns, c.key)
	}
}

// trackedConn is an accepted connection, forgotten once closed.
type trackedConn struct {
	net.Conn
	owner *loopbackHangUp
	key   string
	once  sync.Once
	// inProcess is guarded by owner.mu.
	inProcess bool
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.owner.forget(c) })
	return c.Conn.Close()
}
