package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The bounds on TLS handshakes.
const (
	// MaxHandshakes bounds the TLS handshakes in progress, shared among
	// client addresses (gate). Each costs milliseconds of CPU and a
	// ClientHello's buffers; beyond the bound a new connection waits,
	// unread, so that the requests on connections already open, which is
	// how the API server sends them, go first.
	MaxHandshakes = 16

	// SlowHandshake is how long a handshake may take once it has a place:
	// the API server's takes a round trip or two on the cluster's network,
	// so a connection that sends nothing holds a place no longer than this,
	// and the places free for the waiting at least MaxHandshakes times in it.
	SlowHandshake = time.Second

	// HandshakeTimeout bounds the time from a connection's accept to the
	// end of its handshake, waiting included.
	HandshakeTimeout = ReadHeaderTimeout

	// MaxClientHelloBytes bounds a TLS ClientHello. Browsers and Go's own
	// client send under 2 KiB, post-quantum key shares included; crypto/tls
	// would buffer one of up to 64 KiB (and its records) for each
	// connection still sending it.
	MaxClientHelloBytes = 16 << 10
)

// tlsHandshakeErrors counts the handshakes that failed, took longer than
// SlowHandshake or found no place in time: a client that went away, a port
// scan, or a flood.
var tlsHandshakeErrors = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "flyte_mpi_webhook_tls_handshake_errors_total",
	Help: "TLS handshakes on the webhook port that failed, took longer than 1 s once they had a place, or found no place in time.",
})

func init() {
	metrics.Registry.MustRegister(tlsHandshakeErrors)
}

// handshakeListener hands on TLS connections whose handshake is done, each
// made in a goroutine of its own once the gate lets it.
type handshakeListener struct {
	inner  net.Listener
	config *tls.Config
	// gate holds the handshakes in progress, each for at most slow: MaxHandshakes and SlowHandshake, or the tests' own.
	gate    *gate
	slow    time.Duration
	timeout time.Duration

	// done carries the connections whose handshake is done; it is closed
	// once inner is closed and no handshake is in flight.
	done chan net.Conn
	// inFlight counts the handshakes under way.
	inFlight sync.WaitGroup
}

// newHandshakeListener accepts from inner, which bounds the connections, and
// returns the connections that complete a handshake with config.
func newHandshakeListener(inner net.Listener, config *tls.Config) *handshakeListener {
	return startHandshakes(&handshakeListener{inner: inner, config: config, timeout: HandshakeTimeout, slow: SlowHandshake,
		gate: &gate{max: MaxHandshakes, maxWaiting: MaxConns + MaxWaitingConns}})
}

// startHandshakes starts l accepting.
func startHandshakes(l *handshakeListener) *handshakeListener {
	l.done = make(chan net.Conn)
	go l.accept()
	return l
}

func (l *handshakeListener) accept() {
	for {
		conn, err := l.inner.Accept()
		if err != nil {
			// Closed (inner retries any other error itself): the handshakes under way still reach Accept.
			l.inFlight.Wait()
			close(l.done)
			return
		}
		l.inFlight.Add(1)
		go l.handshake(conn)
	}
}

// handshake makes conn's handshake once the gate lets it, and hands it to
// Accept before its deadline.
func (l *handshakeListener) handshake(conn net.Conn) {
	defer l.inFlight.Done()
	deadline := time.Now().Add(l.timeout)
	_ = conn.SetDeadline(deadline)
	// A connection that sends nothing takes no place among the handshakes.
	first := make([]byte, 1)
	if _, err := io.ReadFull(conn, first); err != nil {
		tlsHandshakeErrors.Inc()
		_ = conn.Close()
		return
	}
	if c, ok := conn.(*fairConn); ok {
		c.listener.sentByte(c)
	}
	ticket, err := l.gate.enter(clientAddress(conn.RemoteAddr().String()), deadline)
	if err != nil {
		tlsHandshakeErrors.Inc()
		_ = conn.Close()
		return
	}
	if slow := time.Now().Add(l.slow); slow.Before(deadline) {
		deadline = slow
	}
	_ = conn.SetDeadline(deadline)
	tlsConn := tls.Server(&helloBoundedConn{Conn: conn, first: first}, l.config)
	err = tlsConn.HandshakeContext(context.Background())
	l.gate.leave(ticket)
	if err != nil {
		tlsHandshakeErrors.Inc() // a client that went away, a scanner, or one that sent nothing within slow
		_ = conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{}) // http.Server sets its own
	abandoned := time.NewTimer(time.Until(deadline))
	defer abandoned.Stop()
	select {
	case l.done <- tlsConn:
	case <-abandoned.C: // nothing calls Accept any more: its server has stopped
		_ = conn.Close()
	}
}

// Accept returns the next connection whose handshake is done; once closed,
// those whose handshake was under way, then net.ErrClosed.
func (l *handshakeListener) Accept() (net.Conn, error) {
	conn, ok := <-l.done
	if !ok {
		return nil, net.ErrClosed
	}
	return conn, nil
}

// Close stops accepting TCP connections; the handshakes under way go on,
// and their connections reach Accept.
func (l *handshakeListener) Close() error {
	return l.inner.Close()
}

// Addr is the address the listener listens on.
func (l *handshakeListener) Addr() net.Addr { return l.inner.Addr() }

// errHelloTooLarge refuses a ClientHello longer than MaxClientHelloBytes.
var errHelloTooLarge = fmt.Errorf("the TLS ClientHello is longer than %d bytes", MaxClientHelloBytes)

// helloBoundedConn reads the first record's header (5 bytes) and the
// handshake message's (4) as crypto/tls reads them, and fails the read that
// completes them when they declare a ClientHello above MaxClientHelloBytes,
// before crypto/tls buffers it.
type helloBoundedConn struct {
	net.Conn
	// first is what was read of the connection before, to be read again.
	first  []byte
	header [9]byte
	seen   int
}

func (c *helloBoundedConn) Read(p []byte) (n int, err error) {
	if len(c.first) > 0 {
		n = copy(p, c.first)
		c.first = c.first[n:]
	} else {
		n, err = c.Conn.Read(p)
	}
	if c.seen < len(c.header) {
		c.seen += copy(c.header[c.seen:], p[:n])
		const recordHandshake, clientHello = 22, 1
		length := int(c.header[6])<<16 | int(c.header[7])<<8 | int(c.header[8])
		if c.seen == len(c.header) && c.header[0] == recordHandshake && c.header[5] == clientHello && length > MaxClientHelloBytes {
			return 0, errHelloTooLarge
		}
	}
	return n, err
}
