package conns

import (
	"context"
	"crypto/tls"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/flyteorg/flyte-mpi-webhook/internal/fair"
)

// tlsHandshakeErrors counts a scan or a flood: their handshakes are not logged.
var tlsHandshakeErrors = promauto.With(metrics.Registry).NewCounter(prometheus.CounterOpts{
	Name: "flyte_mpi_webhook_tls_handshake_errors_total",
	Help: "TLS handshakes on the webhook port that failed, took longer than 1 s once they had a place, or found no place in time.",
})

// handshake makes c's handshake once the gate lets it, and hands it to Accept.
func (l *Listener) handshake(c *connection) {
	defer l.inFlight.Done()
	fail := func() {
		tlsHandshakeErrors.Inc()
		_ = c.Close()
	}
	deadline := time.Now().Add(l.limits.HandshakeTimeout)
	_ = c.SetDeadline(deadline)
	// One that sends nothing takes no place among the handshakes.
	first := make([]byte, helloHeaders)
	if _, err := io.ReadFull(c, first); err != nil || helloTooLarge(first, l.limits.MaxClientHelloBytes) {
		fail()
		return
	}
	c.first = first
	l.mu.Lock()
	if c.state == fair.Silent {
		l.setState(c, fair.Handshake)
	}
	l.mu.Unlock()
	ticket, err := l.handshakes.Enter(c.address, deadline)
	if err != nil {
		fail()
		return
	}
	if slow := time.Now().Add(l.limits.SlowHandshake); slow.Before(deadline) {
		_ = c.SetDeadline(slow)
	}
	tlsConn := tls.Server(c, l.config)
	err = tlsConn.HandshakeContext(context.Background())
	l.handshakes.Leave(ticket)
	l.wakeAcceptLoop()
	if err != nil {
		fail()
		return
	}
	_ = c.SetDeadline(time.Time{}) // http.Server sets its own
	select {
	case l.done <- tlsConn:
	case <-time.After(l.limits.HandshakeTimeout): // nothing calls Accept any more: its server has stopped
		_ = c.Close()
	}
}

// helloHeaders are a TLS record's header (5 bytes) and its message's (4).
const helloHeaders = 9

// helloTooLarge says whether headers declare a ClientHello above maxHello bytes, before crypto/tls buffers it.
func helloTooLarge(headers []byte, maxHello int) bool {
	const recordHandshake, clientHello = 22, 1
	length := int(headers[6])<<16 | int(headers[7])<<8 | int(headers[8])
	return headers[0] == recordHandshake && headers[5] == clientHello && length > maxHello
}
