package server

import (
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server/conns"
)

// Limits are the server's bounds on what a client can make it hold; docs/RELIABILITY.md says why each is what it is.
type Limits struct {
	// conns.Limits bounds the webhook port's connections and TLS handshakes.
	conns.Limits

	// MaxHeaderBytes bounds a request's headers on the webhook port. Defaults to 32 KiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the time a request's headers may take, on every port. Defaults to 5s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds a whole request from its first byte; cmd/webhook gives it to admission as its own. Defaults to 10s.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from a request's headers to its answer's end. Defaults to 15s.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that carries no request. Defaults to 1m30s.
	IdleTimeout time.Duration

	// MaxProbeConns bounds the open connections of the probe port, and of the metrics port. Defaults to 192.
	MaxProbeConns int
	// MaxProbeHeaderBytes bounds a request's headers on the probe and metrics ports. Defaults to 8 KiB.
	MaxProbeHeaderBytes int
}

// DefaultLimits returns the bounds the webhook runs with: with the process's
// own descriptors, the three ports' connections fit a limit of 1,024.
func DefaultLimits() Limits {
	const beforeRequest = 5 * time.Second // from a connection's accept to its handshake's end, or to a request's headers
	return Limits{
		Limits: conns.Limits{
			MaxConns:            512,
			MaxHandshakes:       16,
			SlowHandshake:       time.Second,
			HandshakeTimeout:    beforeRequest,
			MaxClientHelloBytes: 16 << 10,
			QuietFloor:          250 * time.Millisecond,
		},
		MaxHeaderBytes:      32 << 10, // nginx's default
		ReadHeaderTimeout:   beforeRequest,
		ReadTimeout:         10 * time.Second,
		WriteTimeout:        15 * time.Second,
		IdleTimeout:         90 * time.Second, // controller-runtime's
		MaxProbeConns:       192,
		MaxProbeHeaderBytes: 8 << 10, // a bearer token at most
	}
}
