package conns

import (
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/internal/fair"
)

// snapshot is what fair.GiveWay reads of l's connections for newcomer, and the connections its indexes
// name; l.mu held. Only the accept loop takes one, in slices it reuses: one a connection accepted.
func (l *Listener) snapshot(newcomer string, ownUpTo fair.State) (fair.Port, []*connection) {
	heaviest := l.open.Heaviest()
	l.held = append(l.held[:0], l.open.Held(heaviest)...)
	p := fair.Port{Newcomer: newcomer, OwnUpTo: ownUpTo, Heaviest: heaviest, Held: l.read[:0],
		NewcomerHolds: l.open.Count(newcomer), Total: l.open.Total(), Now: l.now(), QuietFloor: l.limits.QuietFloor}
	for _, c := range l.held {
		p.Held = append(p.Held, fair.Conn{State: c.state, Since: c.since})
	}
	l.read = p.Held
	return p, l.held
}

// giveWay is the connection that gives way to newcomer, by ownUpTo, and its fair.Conn then; nil when none
// does. It lets l.mu go while fair.GiveWay peeks (a system call), and takes it again.
func (l *Listener) giveWay(newcomer string, ownUpTo fair.State) (*connection, fair.Conn) {
	p, held := l.snapshot(newcomer, ownUpTo)
	l.mu.Unlock()
	defer l.mu.Lock()
	if i := fair.GiveWay(p, func(i int) bool { return hasUnreadBytes(held[i].Conn) }); i >= 0 {
		return held[i], p.Held[i]
	}
	return nil, fair.Conn{}
}

// full says, l.mu held, whether one address holds every place and none would give way to its own, by
// ownUpTo: the kernel's backlog then keeps the next connection until one would, where place would reset it.
func (l *Listener) full(ownUpTo fair.State) bool {
	if l.closed || l.open.Total() < l.limits.MaxConns || l.open.Count(l.open.Heaviest()) < l.open.Total() {
		return false
	}
	victim, _ := l.giveWay(l.open.Heaviest(), ownUpTo)
	return victim == nil
}

// waitForRoom returns, l.mu held, once the port is not full, and the ownUpTo it judged by; it wakes too
// when a quiet connection has been quiet long enough to give way.
func (l *Listener) waitForRoom() fair.State {
	ownUpTo := l.ownYieldsUpTo()
	for seen := l.changes; l.full(ownUpTo); seen = l.changes {
		var wake *time.Timer
		p, _ := l.snapshot(l.open.Heaviest(), ownUpTo)
		if after, ok := fair.UntilQuiet(p); ok {
			wake = time.AfterFunc(max(after, 10*time.Millisecond), l.wakeAcceptLoop)
		}
		for l.changes == seen {
			l.room.Wait()
		}
		if wake != nil {
			wake.Stop()
		}
		ownUpTo = l.ownYieldsUpTo()
	}
	return ownUpTo
}

// ownYieldsUpTo is fair.Port's OwnUpTo: fair.New while no handshake waits, so the newcomer's starts at once.
func (l *Listener) ownYieldsUpTo() fair.State {
	if _, waiting := l.handshakes.Holders(); waiting > 0 {
		return fair.Silent
	}
	return fair.New
}
