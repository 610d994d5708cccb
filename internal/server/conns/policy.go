package conns

import (
	"slices"
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
	heaviest := l.open.Heaviest()
	held := l.open.Held(heaviest)
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
	case heaviest != newcomer && len(held) > l.open.Count(newcomer)+1:
		victim = held[0]
	case heaviest == newcomer && len(held) == l.open.Total():
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
	c := quietest(l.open.Held(l.open.Heaviest()), connIdle, connNew)
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
	return !l.closed && l.open.Total() >= l.limits.MaxConns && l.open.Addresses() == 1 && l.givesWay(l.open.Heaviest(), ownUpTo) == nil
}

// ownYieldsUpTo is the last state, in giveWayOrder, in which a connection
// gives way to a newcomer of its own address: connNew too once no
// handshake waits for a place, so that the newcomer's can start at once.
func (l *Listener) ownYieldsUpTo() connState {
	if _, waiting := l.handshakes.Holders(); waiting > 0 {
		return connSilent
	}
	return connNew
}
