// Package conns is the webhook port's connection layer, a net.Listener that shares its connections and TLS
// handshakes among client addresses by internal/fair's rule; a connection's states are fair.State's.
package conns

import "time"

// Limits are the connection layer's bounds, part of internal/server's Limits; the defaults named are its DefaultLimits.
type Limits struct {
	// MaxConns bounds the port's open connections, shared among client addresses (fair.GiveWay). Defaults to 512.
	MaxConns int
	// MaxHandshakes bounds the TLS handshakes in progress, shared among client addresses (fair.Gate). Defaults to 16.
	MaxHandshakes int
	// SlowHandshake is how long a handshake may hold its place; the API server's takes a round trip or two. Defaults to 1s.
	SlowHandshake time.Duration
	// HandshakeTimeout bounds the time from a connection's accept to its handshake's end, waiting included. Defaults to 5s.
	HandshakeTimeout time.Duration
	// MaxClientHelloBytes bounds a ClientHello, where crypto/tls would buffer up to 64 KiB a connection. Defaults to 16 KiB.
	MaxClientHelloBytes int
	// QuietFloor is how long a served connection must have sent no request before it gives way to a newcomer of its
	// own address: far above a client's time to its request, and the gap between two reviews on a busy API server's
	// connection, so that the one closed is a parked one (make soak's idle-keepalive). Defaults to 250ms.
	QuietFloor time.Duration
}
