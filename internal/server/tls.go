package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// The bounds on TLS handshakes.
const (
	// MaxHandshakes bounds the TLS handshakes in progress, shared among
	// client addresses (fairGate). Each costs milliseconds of CPU and a
	// ClientHello's buffers; beyond the bound a new connection waits,
	// unread, so that the requests on connections already open, which is
	// how the API server sends them, go first.
	MaxHandshakes = 16

	// SlowHandshake is how long a handshake may take before it may be
	// preempted for a waiting connection, when no address holds more than its share:
	// the API server's takes a round trip or two on the cluster's network,
	// so a connection that sends nothing holds a place no longer than this
	// while others wait.
	SlowHandshake = time.Second

	// HandshakeTimeout bounds the time from a connection's accept to the
	// end of its handshake, waiting included.
	HandshakeTimeout = ReadHeaderTimeout
)

// handshakeListener hands on TLS connections whose handshake is done, each
// made in a goroutine of its own once the gate lets it.
type handshakeListener struct {
	inner  net.Listener
	config *tls.Config
	// gate holds the handshakes in progress: MaxHandshakes and SlowHandshake, or the tests' own.
	gate    *fairGate
	timeout time.Duration

	done   chan net.Conn
	failed chan error
	closed chan struct{}
	close  sync.Once
}

// newHandshakeListener accepts from inner, which bounds the connections, and
// returns the connections that complete a handshake with config.
func newHandshakeListener(inner net.Listener, config *tls.Config) *handshakeListener {
	return startHandshakes(&handshakeListener{inner: inner, config: config, timeout: HandshakeTimeout,
		gate: &fairGate{max: MaxHandshakes, maxWaiting: MaxConns + MaxWaitingConns, slow: SlowHandshake}})
}

// startHandshakes starts l accepting.
func startHandshakes(l *handshakeListener) *handshakeListener {
	l.done, l.failed, l.closed = make(chan net.Conn), make(chan error), make(chan struct{})
	go l.accept()
	return l
}

func (l *handshakeListener) accept() {
	for {
		conn, err := l.inner.Accept()
		if err != nil {
			select {
			case l.failed <- err: // http.Server retries a temporary error, such as too many open files
			case <-l.closed:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go l.handshake(conn)
	}
}

// handshake makes conn's handshake once the gate lets it.
func (l *handshakeListener) handshake(conn net.Conn) {
	deadline := time.Now().Add(l.timeout)
	_ = conn.SetDeadline(deadline)
	ticket, err := l.gate.enter(clientAddress(conn.RemoteAddr().String()), func() { _ = conn.Close() }, deadline)
	if err != nil {
		tlsHandshakeErrors.Inc()
		_ = conn.Close()
		return
	}
	tlsConn := tls.Server(&helloBoundedConn{Conn: conn}, l.config)
	err = tlsConn.HandshakeContext(context.Background())
	l.gate.leave(ticket)
	if err != nil {
		tlsHandshakeErrors.Inc() // a client that went away, a scanner, or one preempted for a newer one
		_ = conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{}) // http.Server sets its own
	select {
	case l.done <- tlsConn:
	case <-l.closed:
		_ = conn.Close()
	}
}

// Accept returns the next connection whose handshake is done.
func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case conn := <-l.done:
		return conn, nil
	case err := <-l.failed:
		return nil, err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; the handshakes in progress end with their connections.
func (l *handshakeListener) Close() error {
	l.close.Do(func() { close(l.closed) })
	return l.inner.Close()
}

// Addr is the address the listener listens on.
func (l *handshakeListener) Addr() net.Addr { return l.inner.Addr() }
