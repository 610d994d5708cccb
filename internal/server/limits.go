package server

import (
	"reflect"
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server/conns"
)

// Limits are every bound on what a client can make the webhook hold, one
// value, logged at start. Each field's default is DefaultLimits';
// docs/RELIABILITY.md says why each is what it is, and TestReliabilityTable
// holds its table to DefaultLimits.
type Limits struct {
	// conns.Limits bounds the webhook port's connections and TLS handshakes.
	conns.Limits

	// MaxHeaderBytes bounds a request's headers on the webhook port. Defaults to 32 KiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the time a request's headers may take, on every port. Defaults to 5s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds a whole request from its first byte. Defaults to 10s.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from a request's headers to its answer's end. Defaults to 15s.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that carries no request. Defaults to 1m30s.
	IdleTimeout time.Duration

	// MaxBodyBytes bounds a body's Content-Length. Defaults to 3 MiB. It and the bounds below are
	// internal/admission's, which reads and decides each review within them.
	MaxBodyBytes int64
	// MaxBufferedBytes caps the Content-Length of the bodies arriving or being answered. Defaults to 6 MiB.
	MaxBufferedBytes int64
	// SmallRequestReserve is the part of MaxBufferedBytes kept for bodies of at most SmallRequestBytes.
	// Defaults to 2 MiB.
	SmallRequestReserve int64
	// SmallRequestBytes is the largest body SmallRequestReserve is kept for. Defaults to 256 KiB.
	SmallRequestBytes int64

	// MaxDeciding caps the requests being decided at once. Defaults to 4.
	MaxDeciding int
	// DecideWait is how long a request waits for its turn to be decided. Defaults to 5s.
	DecideWait time.Duration
	// RetryAfter is the Retry-After of a 503. Defaults to 1s.
	RetryAfter time.Duration

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
		MaxBodyBytes:        3 << 20,          // the API server's own bound on a request body
		MaxBufferedBytes:    6 << 20,
		SmallRequestReserve: 2 << 20,
		SmallRequestBytes:   256 << 10,       // a Flyte MPIJob's review is a few KiB
		MaxDeciding:         4,               // twice the Deployment's cores
		DecideWait:          5 * time.Second, // the API server's timeoutSeconds
		RetryAfter:          time.Second,
		MaxProbeConns:       192,
		MaxProbeHeaderBytes: 8 << 10, // a bearer token at most
	}
}

// MarshalLog logs every field by its name, durations as Go writes them (logr.Marshaler).
func (l Limits) MarshalLog() any {
	fields := map[string]any{}
	for _, v := range []reflect.Value{reflect.ValueOf(l.Limits), reflect.ValueOf(l)} {
		for i := range v.NumField() {
			if f := v.Type().Field(i); !f.Anonymous {
				fields[f.Name] = v.Field(i).Interface()
				if d, ok := fields[f.Name].(time.Duration); ok {
					fields[f.Name] = d.String()
				}
			}
		}
	}
	return fields
}
