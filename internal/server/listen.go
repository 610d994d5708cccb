package server

import (
	"bytes"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The bounds on connections. Each port has its own bound, so that no flood
// of one starves another (the kubelet's probes above all).
const (
	// MaxConns bounds the webhook's open connections, shared among client
	// addresses (fair.go): the webhook port accepts every connection at
	// once, so that none of the API server's waits in the kernel's backlog
	// behind a flood, and beyond the bound a newcomer takes the place of
	// the flooding address's oldest, or waits (MaxWaitingConns). The API
	// servers keep a few keep-alive connections each, and at most
	// MaxInFlight requests are decided or waiting; the rest is for slow
	// clients' connections (which hold no body memory while they wait, see
	// MaxBufferedBytes).
	MaxConns = 512

	// MaxWaitingConns bounds the webhook port's connections waiting, unread,
	// for a place among MaxConns, when their address already holds the most
	// (fair.go): a lone API server's burst beyond MaxConns is served as
	// places free, as the kernel's backlog used to serve it, instead of
	// refused. When the queue is full its oldest is reset. With MaxConns and
	// the probe and metrics ports' MaxProbeConns each (512 + 2 × 192 + 64 =
	// 960) it leaves 64 of a file-descriptor limit of 1,024 for the
	// process's own (listeners, epoll, standard streams, the certificate
	// watcher's), a dozen of them: 128 would leave none.
	MaxWaitingConns = 64

	// MaxClientHelloBytes bounds a TLS ClientHello. Browsers and Go's own
	// client send under 2 KiB, post-quantum key shares included; crypto/tls
	// would buffer one of up to 64 KiB (and its records) for each
	// connection still sending it.
	MaxClientHelloBytes = 16 << 10

	// MaxProbeConns bounds the open connections of the probe and metrics
	// ports, each; one beyond waits in the kernel's listen backlog,
	// unaccepted, where it costs the process neither memory nor a file
	// descriptor. The kubelet and Prometheus open one at a time, but a
	// connection refused a header holds its place for half a second
	// (net/http waits for the client to read the refusal): places for a
	// flood of them beside the kubelet. The three ports' bounds together,
	// with MaxWaitingConns, leave 64 of a file-descriptor limit of 1,024.
	MaxProbeConns = 192

	// MaxProbeHeaderBytes bounds a probe's or a scrape's headers, a few
	// hundred bytes (a bearer token at most).
	MaxProbeHeaderBytes = 8 << 10
)

// listen listens on address for at most maxConns connections at once.
func listen(address string, maxConns int) (net.Listener, error) {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(l, maxConns), nil
}

// errHelloTooLarge refuses a ClientHello longer than MaxClientHelloBytes.
var errHelloTooLarge = fmt.Errorf("the TLS ClientHello is longer than %d bytes", MaxClientHelloBytes)

// helloBoundedConn reads the first record's header (5 bytes) and the
// handshake message's (4) as crypto/tls reads them, and fails the read that
// completes them when they declare a ClientHello above MaxClientHelloBytes,
// before crypto/tls buffers it.
type helloBoundedConn struct {
	net.Conn
	header [9]byte
	seen   int
}

func (c *helloBoundedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
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

// tlsHandshakeErrors counts the handshakes that failed, were preempted or
// found no place in time (handshake.go): a client that went away, a port scan, or a
// flood.
var tlsHandshakeErrors = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "flyte_mpi_webhook_tls_handshake_errors_total",
	Help: "TLS handshakes on the webhook port that failed, were preempted, or found no place in time.",
})

func init() {
	metrics.Registry.MustRegister(tlsHandshakeErrors)
}

// errorLog is an http.Server's ErrorLog, which writes what net/http has to
// say (an accept that failed, a panic) to log, whose sampling bounds a
// flood of it.
func errorLog(logger logr.Logger) *log.Logger {
	return log.New(logWriter(logger), "", 0)
}

type logWriter logr.Logger

func (w logWriter) Write(p []byte) (int, error) {
	logr.Logger(w).Info("net/http", "error", string(bytes.TrimSpace(p)))
	return len(p), nil
}

// probeServer serves handler on a probe or metrics port, with the bounds of
// the webhook port's headers and none of its TLS: the kubelet probes in
// plain HTTP.
func probeServer(handler http.Handler, logger logr.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		MaxHeaderBytes:    MaxProbeHeaderBytes,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadHeaderTimeout,
		WriteTimeout:      ReadHeaderTimeout + 5*time.Second,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          errorLog(logger),
	}
}
