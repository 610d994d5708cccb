// Package conns is the webhook port's connection layer: a net.Listener
// that shares a bounded number of connections, and of TLS handshakes, among
// client addresses by internal/fair's rule (fair.GiveWay, fair.Gate), so
// that no flood from one address keeps the API server's reviews out.
// internal/server serves net/http on it (Listen), reports net/http's
// states to it (Listener.ConnState), and, at the drain's end, waits for
// the connections served to send their request (Listener.WaitForRequests).
//
// A connection's life is fair.State's, whose constants say what each state
// means and where it goes next: acceptInner gives a connection its first,
// Silent or Handshake; then only Listener.setState changes it (handshake,
// ConnState, release, place). docs/RELIABILITY.md has why.
package conns

import "time"

// Limits are the connection layer's bounds. The defaults named below are
// internal/server's DefaultLimits; docs/RELIABILITY.md says why each is
// what it is.
type Limits struct {
	// MaxConns bounds the port's open connections, shared among client addresses (fair.GiveWay). Defaults to 512.
	MaxConns int
	// MaxHandshakes bounds the TLS handshakes in progress, shared among client addresses (fair.Gate). Defaults to 16.
	MaxHandshakes int
	// SlowHandshake is how long a handshake may hold its place: the API server's takes a round trip or two.
	// Defaults to 1s.
	SlowHandshake time.Duration
	// HandshakeTimeout bounds the time from a connection's accept to the end of its handshake, waiting included.
	// Defaults to 5s.
	HandshakeTimeout time.Duration
	// MaxClientHelloBytes bounds a ClientHello, where crypto/tls would buffer up to 64 KiB for each connection.
	// Defaults to 16 KiB.
	MaxClientHelloBytes int
	// QuietFloor is how long a served connection must have sent no request (served and none yet, or
	// idle between two) before it gives way to a newcomer of its own address: far above the time a
	// client takes to send its request once served, and the gap between two reviews on a busy API
	// server's connection, so that the one closed is a parked one (make soak's idle-keepalive).
	// Defaults to 250ms.
	QuietFloor time.Duration
}
