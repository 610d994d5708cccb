package fair

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// gateStep is one event at a gate of two places and two waiters, and what
// the gate holds after it. Holders are named by the order they came in.
type gateStep struct {
	// enter is the address of a newcomer; leave names a holder that leaves;
	// after passes that much time on synctest's clock.
	enter string
	leave *int
	after time.Duration
	// running and waiting are the holders running and waiting after the
	// step, and turnedAway those told so far why they got no place.
	running, waiting []int
	turnedAway       map[int]error
}

func holder(i int) *int { return &i }

// TestGate checks the gate's one rule step by step: a place that frees goes
// to the waiter whose address runs the fewest, a full queue turns away the
// oldest waiter of the address waiting the most, and a waiter is turned
// away at its deadline, of a second here.
func TestGate(t *testing.T) {
	tests := []struct {
		name  string
		steps []gateStep
	}{{
		name: "an address alone takes every place, then waits its turn",
		steps: []gateStep{
			{enter: "a", running: []int{0}},
			{enter: "a", running: []int{0, 1}},
			{enter: "a", running: []int{0, 1}, waiting: []int{2}},
			{leave: holder(0), running: []int{1, 2}},
		},
	}, {
		name: "a freed place goes to the waiter whose address runs the fewest, not the oldest",
		steps: []gateStep{
			{enter: "a", running: []int{0}},
			{enter: "a", running: []int{0, 1}},
			{enter: "a", running: []int{0, 1}, waiting: []int{2}},
			{enter: "b", running: []int{0, 1}, waiting: []int{2, 3}},
			{leave: holder(0), running: []int{1, 3}, waiting: []int{2}},
		},
	}, {
		name: "among addresses running as many, the oldest waiter",
		steps: []gateStep{
			{enter: "a", running: []int{0}},
			{enter: "b", running: []int{0, 1}},
			{enter: "b", running: []int{0, 1}, waiting: []int{2}},
			{enter: "a", running: []int{0, 1}, waiting: []int{2, 3}},
			{leave: holder(1), running: []int{0, 2}, waiting: []int{3}},
		},
	}, {
		name: "nothing running is preempted: a flood's holders keep their places",
		steps: []gateStep{
			{enter: "a", running: []int{0}},
			{enter: "a", running: []int{0, 1}},
			{enter: "b", running: []int{0, 1}, waiting: []int{2}},
		},
	}, {
		name: "a waiter is turned away at its deadline, and its place in the queue is another's",
		steps: []gateStep{
			{enter: "a", running: []int{0}},
			{enter: "a", running: []int{0, 1}},
			{enter: "a", running: []int{0, 1}, waiting: []int{2}},
			{after: 500 * time.Millisecond, running: []int{0, 1}, waiting: []int{2}},
			{enter: "b", running: []int{0, 1}, waiting: []int{2, 3}},
			{after: 500 * time.Millisecond, running: []int{0, 1}, waiting: []int{3}, turnedAway: map[int]error{2: errTimeout}},
			{leave: holder(0), running: []int{1, 3}, turnedAway: map[int]error{2: errTimeout}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := NewGate(2)
				var tickets []*Ticket
				var mu sync.Mutex
				turnedAway := map[int]error{}
				for i, step := range tt.steps {
					switch {
					case step.enter != "":
						n, t := len(tickets), g.queue(step.enter)
						tickets = append(tickets, t)
						go func() {
							if err := g.wait(t, time.Now().Add(time.Second)); err != nil {
								mu.Lock()
								defer mu.Unlock()
								turnedAway[n] = err
							}
						}()
					case step.leave != nil:
						g.Leave(tickets[*step.leave])
					default:
						time.Sleep(step.after)
					}
					synctest.Wait() // every waiter has seen what the step did
					mu.Lock()
					g.mu.Lock()
					running, waiting := holders(tickets, g.running), holders(tickets, g.waiting)
					g.mu.Unlock()
					if !slices.Equal(running, step.running) || !slices.Equal(waiting, step.waiting) {
						t.Errorf("step %d: running %v and waiting %v, want %v and %v", i, running, waiting, step.running, step.waiting)
					}
					for n, err := range turnedAway {
						if !errors.Is(err, step.turnedAway[n]) {
							t.Errorf("step %d: holder %d turned away with %v, want %v", i, n, err, step.turnedAway[n])
						}
					}
					if len(turnedAway) != len(step.turnedAway) {
						t.Errorf("step %d: turned away %v, want %v", i, turnedAway, step.turnedAway)
					}
					mu.Unlock()
				}
				time.Sleep(time.Second) // the waiters still blocked are turned away at their deadline, and return
			})
		})
	}
}

// holders names, sorted, the tickets among tickets that held holds.
func holders(tickets []*Ticket, held Shares[*Ticket]) (names []int) {
	for _, ts := range held.byAddress {
		for _, t := range ts {
			names = append(names, slices.Index(tickets, t))
		}
	}
	slices.Sort(names)
	return names
}
