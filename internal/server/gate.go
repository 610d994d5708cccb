package server

import (
	"errors"
	"sync"
	"time"
)

var errGateTimeout = errors.New("no place came free in time")

// gate lets at most max holders run at once, TLS handshakes or reviews
// being decided, and the others wait, each until its deadline, by the
// port's one rule (givesWay, docs/RELIABILITY.md): a freed place goes to
// the waiter whose address runs the fewest, the oldest among equals. The
// waiters are bounded by what they hold, a connection (MaxConns) and a
// body (MaxBufferedBytes). Nothing is preempted: a holder's own deadline
// bounds it.
type gate struct {
	max int

	mu      sync.Mutex
	running shares[*ticket]
	waiting shares[*ticket]
	// queued numbers the tickets in the order they queued.
	queued uint64
}

// ticket is one holder's place in a gate, waiting or running.
type ticket struct {
	address string
	number  uint64
	// let, of a ticket that waits, is closed once it runs.
	let chan struct{}
}

// enter waits until a place is free for address, and returns the ticket to
// leave it with, or errGateTimeout once deadline passed.
func (g *gate) enter(address string, deadline time.Time) (*ticket, error) {
	t := g.queue(address)
	return t, g.wait(t, deadline)
}

// queue gives address a place if one is free and nobody waits, or queues it.
func (g *gate) queue(address string) *ticket {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queued++
	t := &ticket{address: address, number: g.queued}
	if g.running.total < g.max && g.waiting.total == 0 {
		g.running.add(address, t)
		return t
	}
	t.let = make(chan struct{})
	g.waiting.add(address, t)
	return t
}

// wait returns once t runs, or errGateTimeout once deadline passed.
func (g *gate) wait(t *ticket, deadline time.Time) error {
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

// crowded says whether anyone waits for a place.
func (g *gate) crowded() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting.total > 0
}

// leave gives t's place to the waiter whose address runs the fewest.
func (g *gate) leave(t *ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running.remove(t.address, t)
	for g.running.total < g.max && g.waiting.total > 0 {
		var next *ticket
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
