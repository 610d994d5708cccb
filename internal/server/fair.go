package server

import (
	"errors"
	"net"
	"slices"
	"sync"
	"time"
)

// Fairness on the webhook port. The API servers are the webhook's few
// legitimate clients, each from an address of its own; another client (a
// pod that reaches the port) has another address. So what the webhook port
// holds is held per client address, and shared only under contention: an
// address alone may hold everything. Connections (fairListener): a
// newcomer beyond the bound takes the place of the oldest of the address
// holding the most, if that address would still hold more than the
// newcomer's (shares.fairVictim). Handshakes in progress and reviews being
// decided (fairGate): a place that frees goes to the address running the
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

// fairListener accepts every connection at once, so that a new connection
// of the API server's never waits in the kernel's backlog behind a flood of
// another client's, and keeps at most max open. Beyond it, a newcomer takes
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
	// admitted hold a place and are for Accept, in the order they got it.
	admitted []*fairConn
	// arrived has a value when admitted may have grown.
	arrived chan struct{}
	// failed carries the inner listener's errors to Accept.
	failed chan error
	closed chan struct{}
	close  sync.Once
}

// listenFair listens on address for at most maxConns connections at once,
// shared among client addresses, with maxWaiting more waiting for a place.
func listenFair(address string, maxConns, maxWaiting int) (net.Listener, error) {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	fair := newFairListener(l, maxConns, maxWaiting)
	go fair.acceptInner()
	return fair, nil
}

func newFairListener(inner net.Listener, maxConns, maxWaiting int) *fairListener {
	return &fairListener{Listener: inner, max: maxConns, maxWaiting: maxWaiting, arrived: make(chan struct{}, 1), failed: make(chan error),
		closed: make(chan struct{})}
}

// acceptInner accepts from the inner listener until it is closed; a
// connection waiting is handed to Accept when a place frees (release).
func (l *fairListener) acceptInner() {
	for {
		conn, err := l.Listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			return // Close did it: Accept returns what holds a place, then net.ErrClosed
		}
		if err != nil {
			// Accept's caller backs off a temporary error (too many open files) before it asks again.
			select {
			case l.failed <- err:
			case <-l.closed:
				return
			}
			continue
		}
		l.arrive(&fairConn{Conn: conn, listener: l, address: clientAddress(conn.RemoteAddr().String())})
	}
}

// Accept returns the next connection that has a place; once closed, those
// that got one before Close, then net.ErrClosed.
func (l *fairListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if len(l.admitted) > 0 {
			c := l.admitted[0]
			l.admitted = slices.Delete(l.admitted, 0, 1)
			l.mu.Unlock()
			return c, nil
		}
		l.mu.Unlock()
		select {
		case <-l.arrived:
		case err := <-l.failed:
			return nil, err
		case <-l.closed:
			l.mu.Lock()
			none := len(l.admitted) == 0
			l.mu.Unlock()
			if none {
				return nil, net.ErrClosed
			}
		}
	}
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
		address, victim, ok := l.open.fairVictim(c.address)
		if !ok {
			l.wait(c)
			return
		}
		l.open.remove(address, victim)
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

// admit gives c a place and hands it to Accept.
func (l *fairListener) admit(c *fairConn) {
	l.open.add(c.address, c)
	l.admitted = append(l.admitted, c)
	select {
	case l.arrived <- struct{}{}:
	default: // Accept has a wake-up pending already
	}
}

// release gives c's place, if it still holds one, to the oldest connection waiting.
func (l *fairListener) release(c *fairConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.open.remove(c.address, c) || len(l.waiting) == 0 {
		return
	}
	next := l.waiting[0]
	l.waiting = slices.Delete(l.waiting, 0, 1)
	l.admit(next)
}

// Close stops accepting TCP connections. Those that hold a place are still
// returned by Accept, for their server to serve: their client has sent its
// request, or is sending it. Those waiting for a place are reset, as a full
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

// fairConn is a connection fairListener counts until it is closed.
type fairConn struct {
	net.Conn
	listener *fairListener
	address  string
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

// errGateFull refuses a newcomer when the gate's queue is full and its own
// address holds the most of it.
var errGateFull = errors.New("too many waiting from this client address")

// errGateTimeout refuses a newcomer that found no place before its deadline.
var errGateTimeout = errors.New("no place came free in time")

// fairGate lets at most max holders run at once; the others wait in a queue
// of maxWaiting, by client address. An address alone may take every place.
// Once others wait, a place that frees goes to the address running the
// fewest, so a flooding address delays another's work by a share, not by
// its whole queue. When the queue is full a newcomer takes the place of the
// oldest waiter of the address holding the most (shares.fairVictim).
// Holders that can be preempted (a handshake, not a review being decided)
// are preempted for waiters: the oldest of an address running more than its
// share, while another address waits with less than its own; or, when none
// does, the oldest of the address running the most once it has run for
// slow.
type fairGate struct {
	max, maxWaiting int
	slow            time.Duration

	mu      sync.Mutex
	running shares[*gateTicket]
	waiting shares[*gateTicket]
	// turns are the addresses with waiters, in the order they are let in.
	turns []string
	// slowTimer preempts the oldest holder once slow, for waiters (watchSlow).
	slowTimer *time.Timer
}

// gateTicket is one holder's place in a fairGate, waiting or running.
type gateTicket struct {
	address string
	started time.Time
	// let carries nil once the ticket runs, or why it was turned away;
	// only a ticket that waits has one.
	let chan error
	// preempt ends the holder's work for a newcomer; nil when it cannot be.
	preempt func()
}

// enter waits until a place is free for address, and returns the ticket to
// leave it with, or why it got none: the queue was full, or deadline passed.
// preempt, when not nil, ends the holder's work if the gate preempts it.
func (g *fairGate) enter(address string, preempt func(), deadline time.Time) (*gateTicket, error) {
	t := &gateTicket{address: address, preempt: preempt}
	g.mu.Lock()
	if g.running.total < g.max && g.waiting.total == 0 {
		g.run(t)
		g.mu.Unlock()
		return t, nil
	}
	if g.waiting.total >= g.maxWaiting {
		victimAddress, victim, ok := g.waiting.fairVictim(address)
		if !ok {
			g.mu.Unlock()
			return nil, errGateFull
		}
		g.unqueue(victimAddress, victim)
		victim.let <- errGateFull
	}
	t.let = make(chan error, 1)
	g.waiting.add(address, t)
	if g.waiting.count(address) == 1 {
		g.turns = append(g.turns, address)
	}
	g.preemptForWaiters()
	g.letIn()
	g.watchSlow()
	g.mu.Unlock()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err := <-t.let:
		return admitted(t, err)
	case <-timer.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unqueue(address, t) {
		return nil, errGateTimeout
	}
	return admitted(t, <-t.let) // let in, or turned away, as the deadline passed
}

// watchSlow arms the gate's one timer for when the oldest holder of the
// address running the most will have run for slow, while others wait for
// a place; it then preempts it for them.
func (g *fairGate) watchSlow() {
	if g.slow == 0 || g.waiting.total == 0 || g.running.total < g.max {
		return
	}
	oldest := g.running.oldestOf(g.running.heaviest())
	if oldest == nil || oldest.preempt == nil {
		return
	}
	wait := time.Until(oldest.started.Add(g.slow))
	if g.slowTimer == nil {
		g.slowTimer = time.AfterFunc(wait, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.preemptForWaiters()
			g.letIn()
			g.watchSlow()
		})
		return
	}
	g.slowTimer.Reset(wait)
}

func admitted(t *gateTicket, err error) (*gateTicket, error) {
	if err != nil {
		return nil, err
	}
	return t, nil
}

// leave gives t's place to the next waiter whose turn it is.
func (g *fairGate) leave(t *gateTicket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running.remove(t.address, t) // false when it was preempted, and its place taken already
	g.letIn()
	g.watchSlow()
}

func (g *fairGate) run(t *gateTicket) {
	t.started = time.Now()
	g.running.add(t.address, t)
	if t.let != nil {
		t.let <- nil
	}
}

// unqueue takes t out of the queue, and says whether it was there.
func (g *fairGate) unqueue(address string, t *gateTicket) bool {
	if !g.waiting.remove(address, t) {
		return false
	}
	if g.waiting.count(address) == 0 {
		g.turns = slices.DeleteFunc(g.turns, func(a string) bool { return a == address })
	}
	return true
}

// letIn fills the free places with waiters: each from the address that
// runs the fewest, the one whose turn came longest ago among equals.
func (g *fairGate) letIn() {
	for g.running.total < g.max && len(g.turns) > 0 {
		turn := 0
		for i, address := range g.turns {
			if g.running.count(address) < g.running.count(g.turns[turn]) {
				turn = i
			}
		}
		address := g.turns[turn]
		next := g.waiting.byAddress[address][0]
		g.turns = slices.Delete(g.turns, turn, turn+1)
		g.waiting.remove(address, next)
		if g.waiting.count(address) > 0 {
			g.turns = append(g.turns, address) // its next waiter goes after every other address's
		}
		g.run(next)
	}
}

// preemptForWaiters frees places for waiters by preempting holders that can be.
func (g *fairGate) preemptForWaiters() {
	for g.running.total >= g.max && g.waiting.total > 0 {
		victim := g.overShare()
		if victim == nil && g.slow > 0 {
			if oldest := g.running.oldestOf(g.running.heaviest()); oldest != nil && time.Since(oldest.started) > g.slow {
				victim = oldest
			}
		}
		if victim == nil || victim.preempt == nil {
			return
		}
		g.running.remove(victim.address, victim)
		victim.preempt()
	}
}

// overShare returns the oldest holder of the address running the most,
// when it runs more than its share of the places while another address
// waits with less than its own; nil when none does.
func (g *fairGate) overShare() *gateTicket {
	addresses := len(g.running.byAddress)
	for address := range g.waiting.byAddress {
		if g.running.count(address) == 0 {
			addresses++
		}
	}
	share := max(1, g.max/addresses)
	heaviest := g.running.heaviest()
	if g.running.count(heaviest) <= share {
		return nil
	}
	for address := range g.waiting.byAddress {
		if address != heaviest && g.running.count(address) < share {
			return g.running.oldestOf(heaviest)
		}
	}
	return nil
}
