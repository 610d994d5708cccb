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

	"k8s.io/apimachinery/pkg/util/wait"
)

// Fairness on the webhook port. The API servers are the webhook's few
// legitimate clients, each from an address of its own; another client (a
// pod that reaches the port) has another address. So what the webhook port
// holds is held per client address, and shared only under contention: an
// address alone may hold everything. Connections (fairListener): a
// newcomer beyond the bound takes the place of the oldest of the address
// holding the most, if that address would still hold more than the
// newcomer's (shares.fairVictim). Handshakes in progress and reviews being
// decided (gate.go): a place that frees goes to the address running the
// fewest. One address, or a few, flooding the port still leaves places and
// CPU for another. An attacker spread over many addresses is not told apart.

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

// oldestOf is the oldest of what address holds, or the zero T.
func (s *shares[T]) oldestOf(address string) (oldest T) {
	if held := s.byAddress[address]; len(held) > 0 {
		oldest = held[0]
	}
	return oldest
}

// count is how many address holds.
func (s *shares[T]) count(address string) int { return len(s.byAddress[address]) }

// fairVictim returns the oldest of what the address holding the most holds,
// when that address holds more than newcomer's would once the newcomer took
// its place; false when none does, and the newcomer is not to take a place.
func (s *shares[T]) fairVictim(newcomer string) (address string, victim T, ok bool) {
	address = s.heaviest()
	if address == newcomer || s.count(address) <= s.count(newcomer)+1 {
		return "", victim, false
	}
	return address, s.byAddress[address][0], true
}

// heaviest is the address holding the most; ties go to the smaller
// address, so that the choice does not depend on the map's order.
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

// fairListener is the webhook port's one accept loop. It accepts every
// connection at once, so that a new connection of the API server's never
// waits in the kernel's backlog behind a flood of another client's, keeps
// at most max open, makes each one's TLS handshake once the handshakes'
// gate lets it (handshake), and hands net/http those whose handshake is
// done. Beyond it, a newcomer takes
// the place of the oldest connection of the address holding the most, when
// that address would still hold more; otherwise it waits, unread, in a
// queue of maxWaiting, oldest first, for the next place that frees: a lone
// API server under a burst (nobody else to take a place from) is served
// late, not refused. When the queue is full its oldest is reset: it has
// waited longest, and its client has likely given up or retried.
type fairListener struct {
	net.Listener
	max, maxWaiting int

	mu   sync.Mutex
	open shares[*fairConn]
	// waiting hold no place and have not been read, oldest first.
	waiting []*fairConn
	closed  chan struct{}
	close   sync.Once

	// config, handshakes, slow and timeout make each connection's TLS
	// handshake: MaxHandshakes, SlowHandshake and HandshakeTimeout, or the tests' own.
	config        *tls.Config
	handshakes    *gate
	slow, timeout time.Duration
	// startHandshake starts a connection's handshake once it has a place:
	// go handshake, or the tests' own.
	startHandshake func(*fairConn)
	// inFlight counts the connections with a place whose handshake is not
	// done; done carries those whose handshake is, to Accept. It is closed
	// once the TCP listener is, and none is in flight.
	inFlight sync.WaitGroup
	done     chan net.Conn
	// unanswered counts the connections net/http serves that have sent no
	// request yet (StateNew): the drain waits for them (track).
	unanswered int
}

// listenTLS listens on address for TLS connections with config, at most
// MaxConns at once, shared among client addresses, with MaxWaitingConns more
// waiting for a place.
func listenTLS(address string, config *tls.Config) (*fairListener, error) {
	inner, err := (&net.ListenConfig{Control: deferAccept}).Listen(context.Background(), "tcp", address)
	if err != nil {
		return nil, err
	}
	l := newFairListener(inner, config)
	go l.acceptInner()
	return l, nil
}

// newFairListener returns a listener on inner with the package's bounds,
// which acceptInner starts.
func newFairListener(inner net.Listener, config *tls.Config) *fairListener {
	l := &fairListener{Listener: inner, max: MaxConns, maxWaiting: MaxWaitingConns, closed: make(chan struct{}),
		config: config, handshakes: &gate{max: MaxHandshakes, maxWaiting: MaxConns + MaxWaitingConns},
		slow: SlowHandshake, timeout: HandshakeTimeout, done: make(chan net.Conn)}
	l.startHandshake = func(c *fairConn) { go l.handshake(c) }
	return l
}

// acceptInner accepts from the inner listener until it is closed; a
// connection waiting gets its place when one frees (release).
func (l *fairListener) acceptInner() {
	defer func() {
		// Closed: the handshakes under way still reach Accept, then it returns net.ErrClosed.
		l.inFlight.Wait()
		close(l.done)
	}()
	backoff := time.Duration(0)
	for {
		conn, err := l.Listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Too many open files, most likely: this loop backs off alone, as
			// http.Server would, while the connections accepted already, their
			// handshakes and net/http's Serve go on.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-l.closed:
				return
			}
			continue
		}
		backoff = 0
		l.arrive(&fairConn{Conn: conn, listener: l, address: clientAddress(conn.RemoteAddr().String())})
	}
}

// Accept returns the next connection whose handshake is done; once
// closed, those whose handshake was under way, then net.ErrClosed.
func (l *fairListener) Accept() (net.Conn, error) {
	conn, ok := <-l.done
	if !ok {
		return nil, net.ErrClosed
	}
	return conn, nil
}

// arrive gives c a place, taking one from another address if need be, or
// puts it in the queue. After Close it closes c, as the kernel resets the
// connections still in the listen backlog.
func (l *fairListener) arrive(c *fairConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		c.reset()
		return
	default:
	}
	if l.open.total >= l.max {
		victim := l.idleVictim()
		if victim == nil {
			var ok bool
			if _, victim, ok = l.open.fairVictim(c.address); !ok {
				l.wait(c)
				return
			}
		}
		l.open.remove(victim.address, victim)
		l.setConnState(victim, connClosed)
		victim.reset() // its own Close then finds it gone, and frees no place for the waiting
	}
	l.admit(c)
}

// wait puts c at the end of the queue, closing the queue's oldest when it is full.
func (l *fairListener) wait(c *fairConn) {
	if l.maxWaiting == 0 {
		c.reset()
		return
	}
	if len(l.waiting) >= l.maxWaiting {
		l.waiting[0].reset()
		l.waiting = slices.Delete(l.waiting, 0, 1)
	}
	l.waiting = append(l.waiting, c)
}

// admit gives c a place and starts its handshake.
func (l *fairListener) admit(c *fairConn) {
	l.open.add(c.address, c)
	l.inFlight.Add(1)
	l.startHandshake(c)
}

// release gives c's place, if it still holds one, to the oldest connection waiting.
func (l *fairListener) release(c *fairConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setConnState(c, connClosed)
	if !l.open.remove(c.address, c) || len(l.waiting) == 0 {
		return
	}
	next := l.waiting[0]
	l.waiting = slices.Delete(l.waiting, 0, 1)
	l.admit(next)
}

// Close stops accepting TCP connections. Those that hold a place still
// reach Accept once their handshake is done, for their server to serve:
// their client has sent its request, or is sending it. Those waiting for a place are reset, as a full
// queue resets its oldest: no place will free for them before the shutdown.
func (l *fairListener) Close() error {
	l.mu.Lock()
	l.close.Do(func() { close(l.closed) })
	for _, c := range l.waiting {
		c.reset()
	}
	l.waiting = nil
	l.mu.Unlock()
	return l.Listener.Close()
}

// track is the ConnState hook of the http.Server that serves l's
// connections: net/http calls it as each connection changes state,
// synchronously, so the table is current.
func (l *fairListener) track(conn net.Conn, state http.ConnState) {
	c := servedConn(conn)
	if c == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setState(c, state)
}

// servedConn is the fairConn under a connection net/http serves, or nil.
func servedConn(conn net.Conn) *fairConn {
	tlsConn, ok := conn.(*tls.Conn)
	if !ok {
		return nil
	}
	bounded, ok := tlsConn.NetConn().(*helloBoundedConn)
	if !ok {
		return nil
	}
	c, _ := bounded.Conn.(*fairConn)
	return c
}

// connState is where a connection is, from its accept to its close: the
// first two before net/http serves it, the others as net/http reports them.
type connState int

const (
	// connSilent has sent no byte.
	connSilent connState = iota
	// connHandshake has sent a byte: its TLS handshake waits or is under way.
	connHandshake
	// connNew is served, and has sent no request yet.
	connNew
	// connActive carries a request.
	connActive
	// connIdle is kept alive between requests.
	connIdle
	connClosed
)

// doesNoWork ranks what a connection in state does for its client: those
// that do nothing give way first (evictable, lowest first), those at work
// never do for a newcomer while their address holds one doing nothing.
var doesNoWork = map[connState]int{connSilent: 1, connNew: 2, connIdle: 3}

// setState records c's state, and counts the connections that have sent
// no request yet.
func (l *fairListener) setState(c *fairConn, state http.ConnState) {
	switch state {
	case http.StateNew:
		l.setConnState(c, connNew)
	case http.StateActive:
		l.setConnState(c, connActive)
	case http.StateIdle:
		l.setConnState(c, connIdle)
	default:
		l.setConnState(c, connClosed)
	}
}

func (l *fairListener) setConnState(c *fairConn, state connState) {
	if c.state == connNew {
		l.unanswered--
	}
	if c.state = state; state == connNew {
		l.unanswered++
	}
}

// sentByte records that c has sent its first byte.
func (l *fairListener) sentByte(c *fairConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.state == connSilent {
		l.setConnState(c, connHandshake)
	}
}

// idleVictim is the connection that gives its place to a newcomer: of the
// address holding the most, the one doing the least (sent no byte, then no
// request yet, then idle between requests), the oldest among equals; nil
// when that address holds none doing nothing.
func (l *fairListener) idleVictim() *fairConn {
	var victim *fairConn
	for _, c := range l.open.byAddress[l.open.heaviest()] {
		if rank := doesNoWork[c.state]; rank > 0 && (victim == nil || rank < doesNoWork[victim.state]) {
			victim = c
		}
	}
	return victim
}

// waitForUnanswered returns once every connection net/http serves has sent
// a request or closed, or when ctx ends.
func (l *fairListener) waitForUnanswered(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.unanswered == 0, nil
	})
}

// fairConn is a connection fairListener counts until it is closed.
type fairConn struct {
	net.Conn
	listener *fairListener
	address  string
	// state is where c is, what net/http last reported of it once served.
	state connState
}

// reset closes c for another, with a reset rather than an orderly close:
// the kernel then frees it at once, where a close would hold it for the
// exchange of FINs, which a flood of connections makes the webhook pay.
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
