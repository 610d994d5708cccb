package fair

import (
	"slices"
	"time"
)

// State is where a connection of the webhook port is in its life: net/http's http.ConnState, and the two
// before net/http sees it (Silent, Handshake). The states are declared in the order in which they give way
// to a newcomer when every place is taken, first first (GiveWay); each says what it means and where it goes
// next, besides Closed once it gives way. A served one (New, Active, Idle) with bytes unread never gives way.
type State int

const (
	// Silent is a connection accepted that has sent no byte. It goes to Handshake once it sends one, or to
	// Closed (the handshake's timeout). It gives way to any newcomer, its own address's too.
	Silent State = iota

	// New is a connection net/http serves (http.StateNew) that has sent no request yet. It goes to Active
	// with its first request's first byte, or to Closed. To a newcomer of its own address it gives way only
	// while no handshake waits for a place, and once served for QuietFloor.
	New

	// Handshake is a connection that has sent a byte: its TLS handshake waits for a place or runs, then
	// waits for net/http's Accept. It goes to New once net/http serves it, or to Closed (a handshake that
	// failed or took too long). It never gives way to a newcomer of its own address.
	Handshake

	// Idle is a connection kept alive between requests (http.StateIdle). It goes to Active with its next
	// request, or to Closed (IdleTimeout, the drain). To a newcomer of its own address it gives way only
	// when that address holds every place: the one idle the longest, once for QuietFloor.
	Idle

	// Active is a connection that carries a request (http.StateActive), from its first byte to its
	// answer's end. It goes to Idle, or to Closed. It never gives way.
	Active

	// Closed is a connection that holds no place: closed or hijacked (http.StateClosed,
	// http.StateHijacked), or closed for a newcomer it gave way to. It goes nowhere.
	Closed
)

func (s State) served() bool { return s == New || s == Active || s == Idle }

// Conn is a connection as GiveWay reads it.
type Conn struct {
	State State
	Since time.Time // when it entered State
}

// Port is what GiveWay reads of the webhook port's connections at one moment, for a newcomer finding every place taken.
type Port struct {
	Newcomer      string // the newcomer's address
	OwnUpTo       State  // the last state giving way to its own address: New while no handshake waits, else Silent
	Heaviest      string // the address holding the most, as Shares.Heaviest
	Held          []Conn // Heaviest's connections, oldest first
	NewcomerHolds int    // how many the newcomer's address holds
	Total         int    // how many every address holds
	Now           time.Time
	QuietFloor    time.Duration
}

// GiveWay is the index in p.Held of the connection that gives way to p's newcomer, or -1: the newcomer is reset.
// The address holding the most gives way, by the states' order, each as its doc says, and to a newcomer from a
// lighter address then its oldest, if it would still hold more: a pool that carries traffic reuses its connections
// far sooner than QuietFloor, a parked flood does not (nginx's ngx_drain_connections). unread(i) peeks at Held[i]
// (a system call), asked only of a served one that would otherwise give way.
func GiveWay(p Port, unread func(i int) bool) int {
	own := p.Heaviest == p.Newcomer
	most := Idle
	if own {
		most = p.OwnUpTo
	}
	victim := -1
	for i, c := range p.Held {
		if own && c.State == New && p.Now.Sub(c.Since) < p.QuietFloor {
			continue // served a moment ago: its first request is on its way
		}
		if c.State <= most && (victim < 0 || c.State < p.Held[victim].State) && (!c.State.served() || !unread(i)) {
			victim = i
		}
	}
	switch {
	case victim >= 0:
	case !own && len(p.Held) > p.NewcomerHolds+1:
		victim = 0
	case own && len(p.Held) == p.Total:
		if i := quietest(p.Held, Idle); i >= 0 && p.Now.Sub(p.Held[i].Since) >= p.QuietFloor && !unread(i) {
			victim = i
		}
	}
	return victim
}

// UntilQuiet is how long until the heaviest address's quietest served connection may give way to its own;
// false when none is served and quiet.
func UntilQuiet(p Port) (time.Duration, bool) {
	i := quietest(p.Held, Idle, New)
	if i < 0 {
		return 0, false
	}
	return p.QuietFloor - p.Now.Sub(p.Held[i].Since), true
}

// quietest is the index in held of the connection in one of states the longest, or -1.
func quietest(held []Conn, states ...State) int {
	longest := -1
	for i, c := range held {
		if slices.Contains(states, c.State) && (longest < 0 || c.Since.Before(held[longest].Since)) {
			longest = i
		}
	}
	return longest
}
