// Package conns is the webhook port's connection layer: a net.Listener
// that shares a bounded number of connections, and of TLS handshakes, among
// client addresses by one rule (givesWay, in policy.go), so that no flood
// from one address keeps the API server's reviews out. internal/server
// serves net/http on it (Listen), reports net/http's states to it
// (Listener.ConnState), and, at the drain's end, waits for the connections
// served to send their request (Listener.WaitForRequests).
//
// A connection's life is connState's: its constants, beside the type, say
// in order what each state means, which function moves a connection into
// it, where it goes next, and how soon it gives way when every place is
// taken (policy.go's giveWayOrder); docs/RELIABILITY.md has why.
package conns

import "time"

// connState is where a connection of the port is in its life, as the
// Listener's table holds it: net/http's http.ConnState, after the two
// states before net/http sees the connection, its accept and its TLS
// handshake. acceptInner gives a connection its first state; from its
// place in the table on, it changes state only in Listener.setState.
// connSilent, connHandshake, connNew and connIdle may also go to connClosed
// by giving way to a newcomer (place, by givesWay, which has the
// exceptions: a served connection whose client has sent bytes not read yet
// stays).
type connState int

const (
	// connSilent is a connection accepted (acceptInner) that has sent no
	// byte. It goes to connHandshake once it sends one (sentByte), or to
	// connClosed (HandshakeTimeout). It gives way first, to any newcomer.
	connSilent connState = iota

	// connHandshake is a connection that has sent a byte, at its accept
	// (acceptInner) or since (sentByte): its TLS handshake waits for a
	// place or runs, then waits for net/http's Accept. It goes to
	// connNew once net/http serves it, or to connClosed (a handshake that
	// failed or took too long). It gives way third, never to a newcomer
	// of its own address.
	connHandshake

	// connNew is a connection net/http serves (ConnState, http.StateNew)
	// that has sent no request yet. It goes to connActive with its first
	// request's first byte, or to connClosed. It gives way second; to a
	// newcomer of its own address only once no handshake waits for a
	// place (ownYieldsUpTo) and it has been so for QuietFloor.
	connNew

	// connActive is a connection that carries a request (ConnState,
	// http.StateActive), from its first byte to its answer's end. It goes
	// to connIdle, or to connClosed. It never gives way.
	connActive

	// connIdle is a connection kept alive between requests (ConnState,
	// http.StateIdle). It goes to connActive with its next request, or to
	// connClosed (IdleTimeout, the drain). It gives way last; to a
	// newcomer of its own address only when that address holds every
	// place, the one idle the longest, once idle for QuietFloor
	// (idleLongest).
	connIdle

	// connClosed is a connection that holds no place: closed or hijacked
	// (ConnState; release), or closed for a newcomer it gave way to
	// (place). It goes nowhere.
	connClosed
)

func (s connState) served() bool { return s >= connNew }

// Limits are the connection layer's bounds. The defaults named below are
// internal/server's DefaultLimits; docs/RELIABILITY.md says why each is
// what it is.
type Limits struct {
	// MaxConns bounds the port's open connections, shared among client addresses (givesWay). Defaults to 512.
	MaxConns int
	// MaxHandshakes bounds the TLS handshakes in progress, shared among client addresses (Gate). Defaults to 16.
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
