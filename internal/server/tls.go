package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
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

// handshake makes c's handshake once the gate lets it, and hands it to
// Accept before its deadline.
func (l *fairListener) handshake(c *fairConn) {
	defer l.inFlight.Done()
	deadline := time.Now().Add(l.timeout)
	_ = c.SetDeadline(deadline)
	// A connection that sends nothing takes no place among the handshakes.
	first := make([]byte, 1)
	if _, err := io.ReadFull(c, first); err != nil {
		tlsHandshakeErrors.Inc()
		_ = c.Close()
		return
	}
	l.sentByte(c)
	ticket, err := l.handshakes.enter(c.address, deadline)
	if err != nil {
		tlsHandshakeErrors.Inc()
		_ = c.Close()
		return
	}
	if slow := time.Now().Add(l.slow); slow.Before(deadline) {
		deadline = slow
	}
	_ = c.SetDeadline(deadline)
	tlsConn := tls.Server(&helloBoundedConn{Conn: c, first: first}, l.config)
	err = tlsConn.HandshakeContext(context.Background())
	l.handshakes.leave(ticket)
	if err != nil {
		tlsHandshakeErrors.Inc() // a client that went away, a scanner, or one that sent nothing within slow
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{}) // http.Server sets its own
	abandoned := time.NewTimer(time.Until(deadline))
	defer abandoned.Stop()
	select {
	case l.done <- tlsConn:
	case <-abandoned.C: // nothing calls Accept any more: its server has stopped
		_ = c.Close()
	}
}

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
