package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The bounds on connections, a port each, so that no flood of one starves
// another (the kubelet's probes above all); with the process's own
// descriptors they fit a limit of 1,024.
const (
	// MaxConns bounds the webhook port's open connections, shared among client addresses (givesWay).
	MaxConns = 512

	// MaxProbeConns bounds the open connections of the probe and metrics ports, each.
	MaxProbeConns = 192
)

// listen listens on address for at most maxConns connections at once.
func listen(address string, maxConns int) (net.Listener, error) {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(l, maxConns), nil
}

// fairListener is the webhook port's one accept loop and its one table of
// connections, with what each does. It accepts every connection at once
// (but when full), so that the API server's never waits in the kernel's
// backlog behind a flood; beyond max a newcomer takes the place of the
// connection that gives way (givesWay), or is reset. It makes their TLS
// handshakes (handshake) and hands net/http those done.
type fairListener struct {
	net.Listener
	max int

	mu     sync.Mutex
	open   shares[*fairConn]
	room   sync.Cond // wakes the accept loop when full may have changed
	closed bool

	config        *tls.Config
	handshakes    *gate
	slow, timeout time.Duration // SlowHandshake, HandshakeTimeout
	// startHandshake is go handshake, or the tests' own.
	startHandshake func(*fairConn)
	// inFlight counts the handshakes not done; done carries those done to
	// Accept, and is closed once the TCP listener is and none is in flight.
	inFlight sync.WaitGroup
	done     chan net.Conn
}

// listenTLS listens on address for TLS connections with config.
func listenTLS(address string, config *tls.Config) (*fairListener, error) {
	inner, err := (&net.ListenConfig{Control: deferAccept}).Listen(context.Background(), "tcp", address)
	if err != nil {
		return nil, err
	}
	l := newFairListener(inner, config)
	go l.acceptInner()
	return l, nil
}

// newFairListener returns a listener on inner with the package's bounds.
func newFairListener(inner net.Listener, config *tls.Config) *fairListener {
	l := &fairListener{Listener: inner, max: MaxConns, config: config, handshakes: &gate{max: MaxHandshakes},
		slow: SlowHandshake, timeout: HandshakeTimeout, done: make(chan net.Conn)}
	l.startHandshake = func(c *fairConn) { go l.handshake(c) }
	l.room.L = &l.mu
	return l
}

// acceptInner accepts until the TCP listener is closed, then waits for the
// handshakes under way to reach Accept.
func (l *fairListener) acceptInner() {
	defer func() {
		l.inFlight.Wait()
		close(l.done)
	}()
	backoff := time.Duration(0)
	for {
		l.mu.Lock()
		own := l.own()
		for l.full(own) {
			l.room.Wait()
			own = l.own()
		}
		l.mu.Unlock()
		conn, err := l.Listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // too many open files: this loop backs off alone
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		c := &fairConn{Conn: conn, listener: l, address: clientAddress(conn.RemoteAddr().String())}
		if hasUnreadBytes(conn) {
			c.state = connHandshake
		}
		l.arrive(c, own)
	}
}

// full says whether one address holds every place and none of them would
// give way to another of its, by own: the next connection, likely its,
// would be reset, so the kernel's backlog keeps it, in order, until one would.
func (l *fairListener) full(own connState) bool {
	return !l.closed && l.open.total >= l.max && len(l.open.byAddress) == 1 && l.givesWay(l.open.heaviest(), own) == nil
}

// own is what may give way to a newcomer among its own address's
// connections: one served with no request too once no handshake waits for
// a place, so that the newcomer's handshake can start at once. The accept
// loop decides it before the accept, and the newcomer is placed by it.
func (l *fairListener) own() connState {
	if l.handshakes.crowded() {
		return connSilent
	}
	return connNew
}

// Accept returns the next connection whose handshake is done; once closed,
// those whose handshake was under way, then net.ErrClosed.
func (l *fairListener) Accept() (net.Conn, error) {
	conn, ok := <-l.done
	if !ok {
		return nil, net.ErrClosed
	}
	return conn, nil
}

// arrive gives c a place, the place of the connection that gives way (by
// own) if need be, and starts its handshake; it resets c when none gives
// way, and after Close, as the kernel resets the connections in its backlog.
func (l *fairListener) arrive(c *fairConn, own connState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.reset()
		return
	}
	if l.open.total >= l.max {
		victim := l.givesWay(c.address, own)
		if victim == nil {
			c.reset()
			return
		}
		l.open.remove(victim.address, victim)
		l.setState(victim, connClosed)
		victim.reset()
	}
	l.open.add(c.address, c)
	l.inFlight.Add(1)
	l.startHandshake(c)
}

// givesWay is the port's one rule, the gate's too: when every place is
// taken, the address holding the most gives way. It loses first what does
// no work: a connection that has sent no byte since its accept. To a
// newcomer from a lighter address it then loses one whose handshake is
// done and that has sent no request, then one whose handshake waits or is
// under way, then one idle between requests, the oldest among equals, and
// only then its oldest, if it would still hold more. To its own, nothing
// beyond own, never one idle, which its client may be sending on. One
// served whose client has sent bytes not read yet (a peek) carries a
// request, and stays. nil: nobody gives way, and the newcomer is reset.
func (l *fairListener) givesWay(newcomer string, own connState) *fairConn {
	heaviest := l.open.heaviest()
	held := l.open.byAddress[heaviest]
	most := len(doesNoWork)
	if heaviest == newcomer {
		most = doesNoWork[own]
	}
	var victim *fairConn
	for _, c := range held {
		if rank := doesNoWork[c.state]; rank > 0 && rank <= most && (victim == nil || rank < doesNoWork[victim.state]) &&
			(c.state < connNew || !hasUnreadBytes(c.Conn)) {
			victim = c
		}
	}
	if victim == nil && heaviest != newcomer && len(held) > l.open.count(newcomer)+1 {
		victim = held[0]
	}
	return victim
}

// release frees c's place, if it still holds one.
func (l *fairListener) release(c *fairConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setState(c, connClosed)
	l.open.remove(c.address, c)
}

// handshaken wakes the accept loop once a handshake has left the gate,
// which may no longer be crowded (own).
func (l *fairListener) handshaken() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.room.Broadcast()
}

// Close stops accepting TCP connections. Those that hold a place still reach
// Accept once their handshake is done: their client has sent its request,
// or is sending it.
func (l *fairListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.room.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// connState is what a connection does, from its accept to its close: the
// first two before net/http serves it, the others as net/http reports them.
type connState int

const (
	connSilent    connState = iota // has sent no byte
	connHandshake                  // has sent a byte: its handshake waits or is under way
	connNew                        // served, no request yet
	connActive                     // carries a request
	connIdle                       // kept alive between requests
	connClosed
)

// doesNoWork ranks the states of the connections that do nothing for
// their client, in the order they give way (givesWay).
var doesNoWork = map[connState]int{connSilent: 1, connNew: 2, connHandshake: 3, connIdle: 4}

// track is the ConnState hook of l's http.Server, called as each connection changes state.
func (l *fairListener) track(conn net.Conn, state http.ConnState) {
	tlsConn, ok := conn.(*tls.Conn)
	if !ok {
		return
	}
	c, ok := tlsConn.NetConn().(*fairConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setState(c, fromHTTP[state])
}

// fromHTTP is the connState of each http.ConnState that track is given.
var fromHTTP = map[http.ConnState]connState{http.StateNew: connNew, http.StateActive: connActive,
	http.StateIdle: connIdle, http.StateHijacked: connClosed, http.StateClosed: connClosed}

// setState records c's state, and wakes the accept loop: c may now give way (full).
func (l *fairListener) setState(c *fairConn, state connState) {
	c.state = state
	l.room.Broadcast()
}

// sentByte records that c has sent its first byte.
func (l *fairListener) sentByte(c *fairConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.state == connSilent {
		l.setState(c, connHandshake)
	}
}

// waitForUnanswered returns once every connection served has sent a
// request or closed, or when ctx ends.
func (l *fairListener) waitForUnanswered(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, held := range l.open.byAddress {
			if slices.ContainsFunc(held, func(c *fairConn) bool { return c.state == connNew }) {
				return false, nil
			}
		}
		return true, nil
	})
}

// fairConn is a connection fairListener counts until it is closed.
type fairConn struct {
	net.Conn
	listener *fairListener
	address  string
	state    connState
	// first is what handshake read before the handshake, to be read again.
	first []byte
}

func (c *fairConn) Read(p []byte) (int, error) {
	if len(c.first) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.first)
	c.first = c.first[n:]
	return n, nil
}

// reset closes c with a reset, which the kernel frees at once, unlike the
// FINs of an orderly close.
func (c *fairConn) reset() {
	if tcp, ok := c.Conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Conn.Close()
}

func (c *fairConn) Close() error {
	c.listener.release(c)
	return c.Conn.Close()
}

// shares is what each client address holds, oldest first.
type shares[T comparable] struct {
	byAddress map[string][]T
	total     int
}

func (s *shares[T]) add(address string, t T) {
	if s.byAddress == nil {
		s.byAddress = map[string][]T{}
	}
	s.byAddress[address] = append(s.byAddress[address], t)
	s.total++
}

// remove removes t, and says whether it was held.
func (s *shares[T]) remove(address string, t T) bool {
	held := s.byAddress[address]
	i := slices.Index(held, t)
	if i < 0 {
		return false
	}
	if held = slices.Delete(held, i, i+1); len(held) == 0 {
		delete(s.byAddress, address)
	} else {
		s.byAddress[address] = held
	}
	s.total--
	return true
}

// count is how many address holds.
func (s *shares[T]) count(address string) int { return len(s.byAddress[address]) }

// heaviest is the address holding the most; the smaller among equals.
func (s *shares[T]) heaviest() (address string) {
	most := 0
	for a, held := range s.byAddress {
		if len(held) > most || len(held) == most && a < address {
			address, most = a, len(held)
		}
	}
	return address
}

// clientAddress is the address part of a remote address: the client's IP.
func clientAddress(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}
