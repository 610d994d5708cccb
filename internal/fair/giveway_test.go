package fair

import (
	"testing"
	"time"
)

// conn is a connection of a test's Port: its state, for how long, and
// whether its client has sent bytes not read yet.
type conn struct {
	state  State
	age    time.Duration
	unread bool
}

func active(n int) []conn { return slicesOf(conn{state: Active}, n) }

func slicesOf(c conn, n int) (held []conn) {
	for range n {
		held = append(held, c)
	}
	return held
}

// TestGiveWay checks the rule on snapshots: which of the heaviest
// address's connections gives way to a newcomer, by the newcomer's address,
// the states, how long each has been so, and the peek.
func TestGiveWay(t *testing.T) {
	const floor = 250 * time.Millisecond
	tests := []struct {
		name string
		held []conn // the heaviest address's, 10.0.0.9, oldest first
		// own: the newcomer is 10.0.0.9's; else 10.0.0.1's, holding newcomerHolds.
		own           bool
		newcomerHolds int
		ownUpTo       State
		total         int // 0: the heaviest's and the newcomer's
		want          int // the index that gives way, -1 for none
	}{
		{name: "a flood leaves a place for another address", held: active(16), want: 0},
		{name: "the flooding address itself finds none", held: active(16), own: true, want: -1},
		{name: "shared evenly: no more places", held: active(8), newcomerHolds: 8, want: -1},
		{name: "one more than even: still none", held: active(8), newcomerHolds: 7, want: -1},
		{name: "two more: the heavier gives its oldest", held: active(8), newcomerHolds: 6, want: 0},
		{name: "to another address, what does no work first: no byte", want: 4,
			held: []conn{{state: Active}, {state: Idle}, {state: Handshake}, {state: New}, {state: Silent}}},
		{name: "then no request", want: 3, held: []conn{{state: Active}, {state: Idle}, {state: Handshake}, {state: New}}},
		{name: "then a handshake", want: 2, held: []conn{{state: Active}, {state: Idle}, {state: Handshake}}},
		{name: "then idle", want: 1, held: []conn{{state: Active}, {state: Idle}}},
		{name: "among equals, the oldest", want: 1, held: []conn{{state: Active}, {state: New}, {state: New}}},
		{name: "one served whose client has sent bytes carries a request, and stays", want: 2,
			held: []conn{{state: Active}, {state: New, unread: true}, {state: Handshake}}},
		{name: "one silent with bytes is not served: it gives way", want: 0, held: []conn{{state: Silent, unread: true}}},
		{name: "to its own address while a handshake waits, only one that sent nothing", own: true, ownUpTo: Silent, want: 2,
			held: []conn{{state: New, age: time.Hour}, {state: Handshake}, {state: Silent}}},
		{name: "none that sent nothing: none", own: true, ownUpTo: Silent, total: 9, want: -1,
			held: []conn{{state: New, age: time.Hour}, {state: Handshake}, {state: Idle, age: time.Hour}}},
		{name: "to its own with no handshake waiting, one served with no request for QuietFloor", own: true, ownUpTo: New, want: 1,
			held: []conn{{state: Handshake}, {state: New, age: floor}}},
		{name: "served a moment ago: its request is on its way", own: true, ownUpTo: New, total: 9, want: -1,
			held: []conn{{state: Handshake}, {state: New, age: floor - time.Millisecond}}},
		{name: "holding every place, its own takes the one idle the longest", own: true, ownUpTo: Silent, want: 2,
			held: []conn{{state: Active}, {state: Idle, age: floor}, {state: Idle, age: floor + time.Millisecond}}},
		{name: "idle less than QuietFloor: none", own: true, ownUpTo: Silent, want: -1,
			held: []conn{{state: Active}, {state: Idle, age: floor - time.Millisecond}}},
		{name: "the one idle the longest carries a request: none", own: true, ownUpTo: Silent, want: -1,
			held: []conn{{state: Idle, age: time.Hour, unread: true}, {state: Idle, age: floor}}},
		{name: "not holding every place, idle is not its own's", own: true, ownUpTo: New, total: 9, want: -1,
			held: []conn{{state: Idle, age: time.Hour}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			p := Port{Newcomer: "10.0.0.1", OwnUpTo: tt.ownUpTo, Heaviest: "10.0.0.9", NewcomerHolds: tt.newcomerHolds,
				Total: tt.total, Now: now, QuietFloor: floor}
			if tt.own {
				p.Newcomer, p.NewcomerHolds = p.Heaviest, len(tt.held)
			}
			if p.Total == 0 {
				p.Total = len(tt.held) + p.NewcomerHolds
				if tt.own {
					p.Total = len(tt.held)
				}
			}
			for _, c := range tt.held {
				p.Held = append(p.Held, Conn{State: c.state, Since: now.Add(-c.age)})
			}
			got := GiveWay(p, func(i int) bool {
				if !p.Held[i].State.served() {
					t.Errorf("peeked at %d, not served", i)
				}
				return tt.held[i].unread
			})
			if got != tt.want {
				t.Errorf("GiveWay = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestUntilQuiet checks how long the accept loop waits for a served
// connection to become quiet enough to give way to its own address.
func TestUntilQuiet(t *testing.T) {
	now := time.Unix(1000, 0)
	p := Port{Now: now, QuietFloor: 250 * time.Millisecond, Held: []Conn{
		{State: Active, Since: now.Add(-time.Hour)}, {State: New, Since: now.Add(-50 * time.Millisecond)},
		{State: Idle, Since: now.Add(-100 * time.Millisecond)}}}
	if after, ok := UntilQuiet(p); !ok || after != 150*time.Millisecond {
		t.Errorf("UntilQuiet = %s, %t; want 150ms, true: the one idle for 100ms", after, ok)
	}
	p.Held = p.Held[:1]
	if after, ok := UntilQuiet(p); ok {
		t.Errorf("UntilQuiet with none served and quiet = %s, true; want false", after)
	}
}
