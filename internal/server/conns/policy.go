package conns

import (
	"errors"
	"net"
	"slices"
	"sync"
	"time"
)

// giveWayOrder ranks the states that do no work for their client, first
// to give way first, as each connState's doc says; connActive, a
// connection carrying a request, and connClosed have no rank.
var giveWayOrder = map[connState]int{connSilent: 1, connNew: 2, connHandshake: 3, connIdle: 4}

// givesWay is the port's one rule, the gate's too: when every place is
// taken, the address holding the most gives way, by giveWayOrder, and to a
// newcomer from a lighter address then its oldest, if it would still hold
// more. To its own, nothing beyond ownUpTo, and one served only once it has
// sent no request for QuietFloor; when it holds every place, then the one
// idle the longest, as long: a pool that carries traffic reuses its
// connections far sooner, a parked flood does not (nginx's
// ngx_drain_connections). A served one whose client has sent bytes not read
// yet carries a request, and stays. nil: the newcomer is reset.
func (l *Listener) givesWay(newcomer string, ownUpTo connState) *connection {
	heaviest := l.open.heaviest()
	held := l.open.byAddress[heaviest]
	most := len(giveWayOrder)
	if heaviest == newcomer {
		most = giveWayOrder[ownUpTo]
	}
	var victim *connection
	for _, c := range held {
		if heaviest == newcomer && c.state == connNew && l.now().Sub(c.since) < l.limits.QuietFloor {
			continue // served a moment ago: its first request is on its way
		}
		if rank := giveWayOrder[c.state]; rank > 0 && rank <= most && (victim == nil || rank < giveWayOrder[victim.state]) &&
			(!c.state.served() || !hasUnreadBytes(c.Conn)) {
			victim = c
		}
	}
	switch {
	case victim != nil:
	case heaviest != newcomer && len(held) > l.open.count(newcomer)+1:
		victim = held[0]
	case heaviest == newcomer && len(held) == l.open.total:
		victim = l.idleLongest(held)
	}
	return victim
}

// idleLongest is held's connection idle the longest, if for QuietFloor, and not sending.
func (l *Listener) idleLongest(held []*connection) *connection {
	longest := quietest(held, connIdle)
	if longest == nil || l.now().Sub(longest.since) < l.limits.QuietFloor || hasUnreadBytes(longest.Conn) {
		return nil
	}
	return longest
}

// untilQuietGivesWay is how long until the heaviest address's quietest
// served connection may give way to its own; false when none is served and quiet.
func (l *Listener) untilQuietGivesWay() (time.Duration, bool) {
	c := quietest(l.open.byAddress[l.open.heaviest()], connIdle, connNew)
	if c == nil {
		return 0, false
	}
	return l.limits.QuietFloor - l.now().Sub(c.since), true
}

// quietest is held's connection in one of states the longest, or nil.
func quietest(held []*connection, states ...connState) *connection {
	var longest *connection
	for _, c := range held {
		if slices.Contains(states, c.state) && (longest == nil || c.since.Before(longest.since)) {
			longest = c
		}
	}
	return longest
}

// full says whether one address holds every place and none would give way
// to its own, by ownUpTo: the kernel's backlog then keeps the next connection
// until one would, where place would reset it.
func (l *Listener) full(ownUpTo connState) bool {
	return !l.closed && l.open.total >= l.limits.MaxConns && len(l.open.byAddress) == 1 && l.givesWay(l.open.heaviest(), ownUpTo) == nil
}

// ownYieldsUpTo is the last state, in giveWayOrder, in which a connection
// gives way to a newcomer of its own address: connNew too once no
// handshake waits for a place, so that the newcomer's can start at once.
func (l *Listener) ownYieldsUpTo() connState {
	if l.handshakes.crowded() {
		return connSilent
	}
	return connNew
}

var errGateTimeout = errors.New("no place came free in time")

// NewGate returns a gate of max places.
func NewGate(max int) *Gate { return &Gate{max: max} }

// Gate lets at most max holders run at once, TLS handshakes or reviews
// being decided, and the others wait, each until its deadline, by the
// port's one rule: a freed place goes to the waiter whose address runs the
// fewest, the oldest among equals. What a waiter holds, a connection or a
// body, bounds the waiters; a holder's own deadline bounds it.
type Gate struct {
	max int

	mu               sync.Mutex
	running, waiting shares[*Ticket]
	queued           uint64 // numbers the tickets in the order they queued
}

// Ticket is one holder's place in a gate, waiting or running.
type Ticket struct {
	address string
	number  uint64
	let     chan struct{} // of a ticket that waits: closed once it runs
}

// Enter waits until a place is free for address, and returns the ticket to
// leave it with, or errGateTimeout once deadline passed.
func (g *Gate) Enter(address string, deadline time.Time) (*Ticket, error) {
	t := g.queue(address)
	return t, g.wait(t, deadline)
}

// queue runs address's ticket if a place is free and nobody waits, or queues it.
func (g *Gate) queue(address string) *Ticket {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queued++
	t := &Ticket{address: address, number: g.queued}
	if g.running.total < g.max && g.waiting.total == 0 {
		g.running.add(address, t)
		return t
	}
	t.let = make(chan struct{})
	g.waiting.add(address, t)
	return t
}

// wait returns once t runs, or errGateTimeout once deadline passed.
func (g *Gate) wait(t *Ticket, deadline time.Time) error {
	if t.let == nil {
		return nil
	}
	select {
	case <-t.let:
		return nil
	case <-time.After(time.Until(deadline)):
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting.remove(t.address, t) {
		return errGateTimeout
	}
	return nil // let in as the deadline passed
}

// Holders says how many of address's holders run and how many wait; the
// empty address counts everyone's.
func (g *Gate) Holders(address string) (running, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if address == "" {
		return g.running.total, g.waiting.total
	}
	return g.running.count(address), g.waiting.count(address)
}

func (g *Gate) crowded() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting.total > 0
}

// Leave gives t's place to the waiter whose address runs the fewest.
func (g *Gate) Leave(t *Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running.remove(t.address, t)
	for g.running.total < g.max && g.waiting.total > 0 {
		var next *Ticket
		for address, waiting := range g.waiting.byAddress {
			if next == nil || g.running.count(address) < g.running.count(next.address) ||
				g.running.count(address) == g.running.count(next.address) && waiting[0].number < next.number {
				next = waiting[0]
			}
		}
		g.waiting.remove(next.address, next)
		g.running.add(next.address, next)
		close(next.let)
	}
}

// ClientAddress is the address part of a remote address: the client's IP.
func ClientAddress(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
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

// remove says whether t was held.
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

func (s *shares[T]) count(address string) int { return len(s.byAddress[address]) }

// heaviest is the address holding the most, the smaller among equals.
func (s *shares[T]) heaviest() (address string) {
	most := 0
	for a, held := range s.byAddress {
		if len(held) > most || len(held) == most && a < address {
			address, most = a, len(held)
		}
	}
	return address
}
