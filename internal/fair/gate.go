package fair

import (
	"errors"
	"net"
	"sync"
	"time"
)

// ClientAddress is a remote address's host, the client's IP: what a Gate and the connection layer share by.
func ClientAddress(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

var errTimeout = errors.New("no place came free in time")

// NewGate returns a gate of max places.
func NewGate(max int) *Gate { return &Gate{max: max} }

// Gate lets at most max holders run at once, TLS handshakes (internal/server/conns) or reviews being
// decided (internal/admission), and the others wait, each until its deadline (Leave says who goes next).
// What a waiter holds, a connection or a body, bounds the waiters; a holder's own deadline bounds it.
type Gate struct {
	max int

	mu               sync.Mutex
	running, waiting Shares[*Ticket]
	queued           uint64 // numbers the tickets in the order they queued
}

// Ticket is one holder's place in a gate, waiting or running.
type Ticket struct {
	address string
	number  uint64
	let     chan struct{} // of a ticket that waits: closed once it runs
}

// Enter waits until a place is free for address, and returns the ticket to leave it with, or an error once deadline passed.
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
		g.running.Add(address, t)
		return t
	}
	t.let = make(chan struct{})
	g.waiting.Add(address, t)
	return t
}

// wait returns once t runs, or errTimeout once deadline passed.
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
	if g.waiting.Remove(t.address, t) {
		return errTimeout
	}
	return nil // let in as the deadline passed
}

// Holders says how many holders run and how many wait, every address's.
func (g *Gate) Holders() (running, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running.total, g.waiting.total
}

// Leave gives t's place to the waiter whose address runs the fewest, the oldest among equals.
func (g *Gate) Leave(t *Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running.Remove(t.address, t)
	for g.running.total < g.max && g.waiting.total > 0 {
		var next *Ticket
		for address, waiting := range g.waiting.byAddress {
			if next == nil || g.running.Count(address) < g.running.Count(next.address) ||
				g.running.Count(address) == g.running.Count(next.address) && waiting[0].number < next.number {
				next = waiting[0]
			}
		}
		g.waiting.Remove(next.address, next)
		g.running.Add(next.address, next)
		close(next.let)
	}
}
