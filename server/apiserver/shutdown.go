package apiserver

import (
	"net"
	"sync"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// hangUpLoopbackOnClose returns listener, which closes the idle connections
// of the in-process clients (loopback) once it is closed itself.
//
// The in-process clients (controllers, simulation, the plane manager,
// admission) share one HTTP/2 connection to the server. At shutdown
// net/http closes the listener, sends GOAWAY on every connection and waits
// until each is closed; a client closes its connection after GOAWAY only
// when a stream on it ends, so an idle one stays open until the server
// gives up on it after one second (x/net/http2's goAwayTimeout), every
// shutdown. Closing the idle loopback connections as the listener closes,
// before the GOAWAY, lets the server stop as soon as its requests are
// done; a busy one still drains and is closed by its client after its last
// stream. No new connection can be opened once the listener is closed.
func hangUpLoopbackOnClose(listener net.Listener, loopback *rest.Config) net.Listener {
	if listener == nil || loopback == nil {
		return listener
	}
	return &loopbackHangUpListener{Listener: listener, loopback: loopback}
}

type loopbackHangUpListener struct {
	net.Listener
	loopback *rest.Config
	once     sync.Once
}

func (l *loopbackHangUpListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(l.closeIdleLoopback)
	return err
}

// closeIdleLoopback closes the idle connections of the transport every
// loopback client uses: client-go keeps one transport per TLS
// configuration, and every in-process client is a copy of the same
// loopback configuration.
func (l *loopbackHangUpListener) closeIdleLoopback() {
	transport, err := rest.TransportFor(l.loopback)
	if err != nil {
		klog.ErrorS(err, "Closing idle loopback connections at shutdown")
		return
	}
	utilnet.CloseIdleConnectionsFor(transport)
}
