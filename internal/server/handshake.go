package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"sync"
	"time"
)

// The bounds on TLS handshakes.
const (
	// MaxHandshakes bounds the TLS handshakes in progress. Each costs
	// milliseconds of CPU and a ClientHello's buffers; beyond the bound a
	// new connection waits, unread, so that the requests on connections
	// already open, which is how the API server sends them, go first.
	MaxHandshakes = 16

	// SlowHandshake is how long a handshake may take before a new
	// connection that finds no place may cut it: the API server's takes a
	// round trip or two on the cluster's network.
	SlowHandshake = time.Second

	// HandshakeTimeout bounds the time from a connection's accept to the
	// end of its handshake, waiting included.
	HandshakeTimeout = ReadHeaderTimeout
)

// handshakeListener hands on TLS connections whose handshake is done, each
// made in a goroutine of its own within the bounds above.
type handshakeListener struct {
	inner  net.Listener
	config *tls.Config
	// max, slow and timeout are MaxHandshakes, SlowHandshake and HandshakeTimeout, or the tests' own.
	max           int
	slow, timeout time.Duration

	done   chan net.Conn
	failed chan error
	closed chan struct{}
	close  sync.Once

	mu sync.Mutex
	// inProgress are the handshakes under way, oldest first.
	inProgress []handshake
	// freed is closed, and replaced, when a handshake ends.
	freed chan struct{}
}

type handshake struct {
	conn    net.Conn
	started time.Time
}

// newHandshakeListener accepts from inner, which bounds the connections, and
// returns the connections that complete a handshake with config.
func newHandshakeListener(inner net.Listener, config *tls.Config) *handshakeListener {
	return startHandshakes(&handshakeListener{inner: inner, config: config, max: MaxHandshakes, slow: SlowHandshake,
		timeout: HandshakeTimeout})
}

// startHandshakes starts l accepting.
func startHandshakes(l *handshakeListener) *handshakeListener {
	l.done, l.failed, l.closed, l.freed = make(chan net.Conn), make(chan error), make(chan struct{}), make(chan struct{})
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

// handshake makes conn's handshake once there is a place for it.
func (l *handshakeListener) handshake(conn net.Conn) {
	deadline := time.Now().Add(l.timeout)
	_ = conn.SetDeadline(deadline)
	if !l.begin(conn, deadline) {
		tlsHandshakeErrors.Inc()
		_ = conn.Close()
		return
	}
	tlsConn := tls.Server(&helloBoundedConn{Conn: conn}, l.config)
	err := tlsConn.HandshakeContext(context.Background())
	l.end(conn)
	if err != nil {
		tlsHandshakeErrors.Inc() // a client that went away, a scanner, or one cut for a newer one
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

// begin waits until conn may start its handshake: when fewer than l.max
// are in progress, or when the oldest has taken more than l.slow, which
// begin then cuts. It returns false once deadline passes.
func (l *handshakeListener) begin(conn net.Conn, deadline time.Time) bool {
	for {
		l.mu.Lock()
		if len(l.inProgress) >= l.max && time.Since(l.inProgress[0].started) > l.slow {
			_ = l.inProgress[0].conn.Close()
			l.inProgress = l.inProgress[1:]
		}
		if len(l.inProgress) < l.max {
			l.inProgress = append(l.inProgress, handshake{conn, time.Now()})
			l.mu.Unlock()
			return true
		}
		freed, untilSlow := l.freed, l.slow-time.Since(l.inProgress[0].started)
		l.mu.Unlock()
		wait := time.NewTimer(min(untilSlow, time.Until(deadline)))
		select {
		case <-freed:
		case <-wait.C:
		case <-l.closed:
			wait.Stop()
			return false
		}
		wait.Stop()
		if !time.Now().Before(deadline) {
			return false
		}
	}
}

// end gives conn's place back.
func (l *handshakeListener) end(conn net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inProgress = slices.DeleteFunc(l.inProgress, func(h handshake) bool { return h.conn == conn })
	close(l.freed)
	l.freed = make(chan struct{})
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
