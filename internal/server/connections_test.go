package server

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestGivesWay checks the count part of the one rule, among connections
// that all work: a newcomer takes the place of the oldest of the address
// holding the most only when that address would still hold more than the
// newcomer's.
func TestGivesWay(t *testing.T) {
	type held struct {
		address string
		n       int
	}
	tests := []struct {
		name     string
		held     []held
		newcomer string
		want     string // the address losing its oldest; "" when the newcomer finds no place
	}{
		{"a flood leaves a place for another address", []held{{"10.0.0.9", 16}}, "10.0.0.1", "10.0.0.9"},
		{"the flooding address itself finds none", []held{{"10.0.0.9", 16}}, "10.0.0.9", ""},
		{"shared evenly: no more places", []held{{"10.0.0.1", 8}, {"10.0.0.9", 8}}, "10.0.0.1", ""},
		{"one more than even: still none", []held{{"10.0.0.1", 7}, {"10.0.0.9", 8}}, "10.0.0.1", ""},
		{"two more: the heavier gives one", []held{{"10.0.0.1", 6}, {"10.0.0.9", 8}}, "10.0.0.1", "10.0.0.9"},
		{"the heaviest of three gives", []held{{"10.0.0.1", 2}, {"10.0.0.8", 5}, {"10.0.0.9", 9}}, "10.0.0.7", "10.0.0.9"},
		{"a tie goes to the smaller address", []held{{"10.0.0.8", 4}, {"10.0.0.9", 4}}, "10.0.0.1", "10.0.0.8"},
		{"spread over many addresses: none", []held{{"10.0.0.8", 1}, {"10.0.0.9", 1}}, "10.0.0.1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newFairListener(nil, nil)
			for _, h := range tt.held {
				for range h.n {
					l.open.add(h.address, &fairConn{address: h.address, state: connActive})
				}
			}
			victim := l.givesWay(tt.newcomer, connSilent)
			got := ""
			if victim != nil {
				got = victim.address
				if victim != l.open.byAddress[got][0] {
					t.Errorf("the victim is not its address's oldest")
				}
			}
			if got != tt.want {
				t.Errorf("givesWay(%s) took from %q, want %q", tt.newcomer, got, tt.want)
			}
		})
	}
}

// closeRecorder is a connection that records its Close, and is never read.
type closeRecorder struct {
	net.Conn
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// TestFairListenerPlaces checks, step by step, which connections hold
// places, wait, are handed to Accept and are closed, as others arrive and close.
func TestFairListenerPlaces(t *testing.T) {
	type step struct {
		arrives, closes string // a connection's name: its address's letter and its number
		// handshaken frees a handshake place (admitWaiting).
		handshaken bool
		// doing is what the connection that arrives does from then on: "" is
		// work (a request), else silent, handshake, new or idle.
		doing    string
		admitted []string
		waiting  []string
		closed   []string // every connection the listener has closed so far
	}
	tests := []struct {
		name            string
		max, maxWaiting int
		// crowded has a handshake wait for a place throughout.
		crowded bool
		steps   []step
	}{
		{"a lone address beyond the bound waits, then takes the next place that frees", 2, 2, false, []step{
			{arrives: "a1", admitted: []string{"a1"}},
			{arrives: "a2", admitted: []string{"a2"}},
			{arrives: "a3", waiting: []string{"a3"}},
			{arrives: "a4", waiting: []string{"a3", "a4"}},
			{closes: "a1", admitted: []string{"a3"}, waiting: []string{"a4"}},
			{arrives: "a5", waiting: []string{"a4", "a5"}},
			{closes: "a2", admitted: []string{"a4"}, waiting: []string{"a5"}},
		}},
		{"a full queue closes its oldest", 1, 2, false, []step{
			{arrives: "a1", admitted: []string{"a1"}},
			{arrives: "a2", waiting: []string{"a2"}},
			{arrives: "a3", waiting: []string{"a2", "a3"}},
			{arrives: "a4", waiting: []string{"a3", "a4"}, closed: []string{"a2"}},
			{closes: "a1", admitted: []string{"a3"}, waiting: []string{"a4"}, closed: []string{"a2"}},
		}},
		{"another address takes the busiest's oldest place at once, before the busiest's waiting", 2, 2, false, []step{
			{arrives: "a1", admitted: []string{"a1"}},
			{arrives: "a2", admitted: []string{"a2"}},
			{arrives: "a3", waiting: []string{"a3"}},
			{arrives: "b1", admitted: []string{"b1"}, waiting: []string{"a3"}, closed: []string{"a1"}},
			{closes: "a1", waiting: []string{"a3"}, closed: []string{"a1"}},        // the reset one's own close frees no place
			{arrives: "b2", waiting: []string{"a3", "b2"}, closed: []string{"a1"}}, // 1 against 1: no place to take
			{closes: "a2", admitted: []string{"a3"}, waiting: []string{"b2"}, closed: []string{"a1"}},
		}},
		{"without a queue a newcomer finding no place is closed", 1, 0, false, []step{
			{arrives: "a1", admitted: []string{"a1"}},
			{arrives: "a2", closed: []string{"a2"}},
		}},
		{"the address holding the most loses what does no work first: no byte, no request, then idle", 4, 1, false, []step{
			{arrives: "a1", admitted: []string{"a1"}},
			{arrives: "a2", doing: "idle", admitted: []string{"a2"}},
			{arrives: "a3", doing: "new", admitted: []string{"a3"}},
			{arrives: "a4", doing: "silent", admitted: []string{"a4"}},
			{arrives: "b1", admitted: []string{"b1"}, closed: []string{"a4"}},
			{arrives: "b2", admitted: []string{"b2"}, closed: []string{"a3", "a4"}},
			{arrives: "b3", admitted: []string{"b3"}, closed: []string{"a2", "a3", "a4"}},
			{arrives: "b4", waiting: []string{"b4"}, closed: []string{"a2", "a3", "a4"}},
		}},
		{"no request yet: one served gives way before one whose handshake waits or is under way", 3, 1, false, []step{
			{arrives: "a1", doing: "idle", admitted: []string{"a1"}},
			{arrives: "a2", doing: "handshake", admitted: []string{"a2"}},
			{arrives: "a3", doing: "new", admitted: []string{"a3"}},
			{arrives: "b1", admitted: []string{"b1"}, closed: []string{"a3"}},
			{arrives: "b2", admitted: []string{"b2"}, closed: []string{"a2", "a3"}},
			{arrives: "b3", waiting: []string{"b3"}, closed: []string{"a2", "a3"}},
		}},
		{"its own newcomer takes only one that has sent nothing", 4, 1, false, []step{
			{arrives: "a1", doing: "idle", admitted: []string{"a1"}},
			{arrives: "a2", doing: "handshake", admitted: []string{"a2"}},
			{arrives: "a3", doing: "new", admitted: []string{"a3"}},
			{arrives: "a4", doing: "silent", admitted: []string{"a4"}},
			{arrives: "a5", admitted: []string{"a5"}, closed: []string{"a4"}},
			{arrives: "a6", waiting: []string{"a6"}, closed: []string{"a4"}},
		}},
		{"once a handshake place is free, the oldest waiting takes its own address's place with no request, not an idle one", 3, 2, false, []step{
			{arrives: "a1", doing: "idle", admitted: []string{"a1"}},
			{arrives: "a2", doing: "handshake", admitted: []string{"a2"}},
			{arrives: "a3", doing: "new", admitted: []string{"a3"}},
			{arrives: "a4", doing: "new", waiting: []string{"a4"}},
			{arrives: "a5", waiting: []string{"a4", "a5"}},
			{handshaken: true, admitted: []string{"a4"}, waiting: []string{"a5"}, closed: []string{"a3"}},
			{handshaken: true, admitted: []string{"a5"}, closed: []string{"a3", "a4"}},
			{arrives: "a6", waiting: []string{"a6"}, closed: []string{"a3", "a4"}},
			{handshaken: true, waiting: []string{"a6"}, closed: []string{"a3", "a4"}},
		}},
		{"while a handshake waits for a place, the waiting wait", 2, 1, true, []step{
			{arrives: "a1", doing: "new", admitted: []string{"a1"}},
			{arrives: "a2", doing: "new", admitted: []string{"a2"}},
			{arrives: "a3", waiting: []string{"a3"}},
			{handshaken: true, waiting: []string{"a3"}},
		}},
		{"a connection at work is not the victim while its address holds one doing nothing", 3, 1, false, []step{
			{arrives: "a1", admitted: []string{"a1"}},
			{arrives: "a2", admitted: []string{"a2"}},
			{arrives: "a3", doing: "idle", admitted: []string{"a3"}},
			{arrives: "b1", admitted: []string{"b1"}, closed: []string{"a3"}},
			{arrives: "b2", waiting: []string{"b2"}, closed: []string{"a3"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newFairListener(nil, nil)
			l.max, l.maxWaiting = tt.max, tt.maxWaiting
			if tt.crowded {
				l.handshakes = &gate{maxWaiting: 1}
				l.handshakes.queue("10.0.0.h")
			}
			var admitted []*fairConn
			l.startHandshake = func(c *fairConn) { admitted = append(admitted, c) }
			conns := map[string]*fairConn{}
			recorders := map[string]*closeRecorder{}
			names := func(cs []*fairConn) (got []string) {
				for _, c := range cs {
					for name, known := range conns {
						if known == c {
							got = append(got, name)
						}
					}
				}
				return got
			}
			for i, step := range tt.steps {
				if step.arrives != "" {
					recorders[step.arrives] = &closeRecorder{}
					conns[step.arrives] = &fairConn{Conn: recorders[step.arrives], listener: l, address: "10.0.0." + step.arrives[:1],
						state: map[string]connState{"": connActive, "silent": connSilent, "handshake": connHandshake, "new": connNew, "idle": connIdle}[step.doing]}
					l.arrive(conns[step.arrives])
				}
				if step.closes != "" {
					l.release(conns[step.closes]) // as its Close does, which the test does not record
				}
				if step.handshaken {
					l.admitWaiting()
				}
				got := step
				got.admitted, got.waiting, got.closed = names(admitted), names(l.waiting), nil
				for name, r := range recorders {
					if r.closed {
						got.closed = append(got.closed, name)
					}
				}
				slices.Sort(got.closed)
				admitted = nil
				if diff := cmp.Diff(step, got, cmp.AllowUnexported(step), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("step %d (-want +got):\n%s", i, diff)
				}
				if l.open.total > tt.max || len(l.waiting) > tt.maxWaiting {
					t.Errorf("step %d: %d open and %d waiting, beyond %d and %d", i, l.open.total, len(l.waiting), tt.max, tt.maxWaiting)
				}
			}
		})
	}
}

// TestFairListenerWaitingUnread checks over TCP that a connection beyond
// the bound from the only address is not closed but waits, unread, and is
// returned by Accept with what its client sent once a place frees.
func TestFairListenerWaitingUnread(t *testing.T) {
	l := testListener(t, nil, 1, 1)
	handOver(l)
	go l.acceptInner()
	t.Cleanup(func() { _ = l.Close() })
	dial := func(data string) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	dial("h")
	first := acceptWorking(t, l)
	dial("hello")
	fair := l
	deadline := time.Now().Add(10 * time.Second)
	for waiting := 0; waiting == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the second connection never waited")
		}
		fair.mu.Lock()
		waiting = len(fair.waiting)
		fair.mu.Unlock()
		runtime.Gosched()
	}
	_ = first.Close()
	admitted, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	_ = admitted.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 5)
	if _, err := io.ReadFull(admitted, got); err != nil || string(got) != "hello" {
		t.Errorf("read %q, %v from the admitted connection; want what the waiting client sent, hello", got, err)
	}
}

// acceptWorking returns l's next connection, taken as carrying a request.
func acceptWorking(t *testing.T, l *fairListener) net.Conn {
	t.Helper()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setState(c.(*fairConn), connActive)
	return c
}

// TestConnectionStates checks the table of connections as net/http's
// ConnState feeds it: a connection whose handshake is done and that has
// sent no request is counted unanswered, and no longer once it has; it is
// idle once answered, and holds no place once closed.
func TestConnectionStates(t *testing.T) {
	tcp, _, client := serveTLS(t)
	table := func() (unanswered int, states []connState) {
		tcp.mu.Lock()
		defer tcp.mu.Unlock()
		for _, held := range tcp.open.byAddress {
			for _, c := range held {
				states = append(states, c.state)
			}
		}
		return tcp.unanswered, states
	}
	conn, err := tls.Dial("tcp", tcp.Addr().String(), client)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	poll(t, "the connection is served, with no request yet", func() bool {
		unanswered, states := table()
		return unanswered == 1 && slices.Equal(states, []connState{connNew})
	})
	if err := request(conn); err != nil {
		t.Fatal(err)
	}
	poll(t, "the connection is idle, answered", func() bool {
		unanswered, states := table()
		return unanswered == 0 && slices.Equal(states, []connState{connIdle})
	})
	conn.Close()
	poll(t, "the closed connection holds no place", func() bool {
		unanswered, states := table()
		return unanswered == 0 && len(states) == 0
	})
}

// backlog is a TCP listener's backlog: Accept returns its connections, in
// order, or waits for the next, until it is closed; once tooMany is
// closed, it may fail instead with too many open files.
type backlog struct {
	net.Listener
	conns           chan net.Conn
	closed, tooMany chan struct{}
}

func (b *backlog) Accept() (net.Conn, error) {
	select {
	case c := <-b.conns:
		return c, nil
	case <-b.closed:
		return nil, net.ErrClosed
	case <-b.tooMany:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept", syscall.EMFILE)}
	}
}

func (b *backlog) Close() error { close(b.closed); return nil }

// TestAcceptErrorsStayInside checks that the errors of the TCP listener
// (too many open files) never reach Accept's caller, net/http's Serve, which
// would stop for up to a second each: the connection accepted among them is
// returned, and once closed, Accept returns net.ErrClosed.
func TestAcceptErrorsStayInside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		server, client := net.Pipe()
		defer client.Close()
		inner := &backlog{conns: make(chan net.Conn, 1), closed: make(chan struct{}), tooMany: make(chan struct{})}
		inner.conns <- server
		close(inner.tooMany)
		l := newFairListener(inner, nil)
		handOver(l)
		go l.acceptInner()
		if c, err := l.Accept(); err != nil || c.(*fairConn).Conn != server {
			t.Fatalf("Accept = %v, %v; want the connection accepted before the errors", c, err)
		}
		time.Sleep(3 * time.Second) // the clock is synctest's: the loop backs off through the errors
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if c, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept once closed = %v, %v; want net.ErrClosed", c, err)
		}
		synctest.Wait()
	})
}

// handOver has l hand each connection that gets a place to Accept as it
// is, without a handshake.
func handOver(l *fairListener) {
	l.startHandshake = func(c *fairConn) {
		go func() {
			defer l.inFlight.Done()
			l.done <- c
		}()
	}
}

// TestHasUnreadBytes checks the peek at accept over TCP: a connection whose
// client has written is told apart from one whose client has not, and the
// byte is still there to read.
func TestHasUnreadBytes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, data := range []string{"", "h"} {
		client, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		server, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer server.Close()
		if got := hasUnreadBytes(server); got != (runtime.GOOS != "linux") {
			t.Errorf("before the client wrote: hasUnreadBytes = %t", got)
		}
		if data == "" {
			continue
		}
		if _, err := client.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
		poll(t, "the byte arrives", func() bool { return hasUnreadBytes(server) })
		got := make([]byte, 1)
		if _, err := io.ReadFull(server, got); err != nil || string(got) != data {
			t.Errorf("read %q, %v after the peek; want %q", got, err, data)
		}
	}
}

// TestServedWithUnreadBytesDoesNotGiveWay checks the peek before a
// connection served with no request gives way, over TCP: of two from the
// address holding every place, the one whose client has written, a request
// net/http has not read yet, keeps its place; the one whose client has not
// gives it to the connection waiting.
func TestServedWithUnreadBytesDoesNotGiveWay(t *testing.T) {
	l := testListener(t, nil, 2, 1)
	t.Cleanup(func() { _ = l.Close() })
	l.startHandshake = func(*fairConn) {}
	var served []*fairConn
	for _, data := range []string{"POST", ""} {
		client, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		server, err := l.Listener.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = server.Close() })
		if _, err := client.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
		c := &fairConn{Conn: server, listener: l, address: "127.0.0.1", state: connNew}
		l.open.add(c.address, c)
		served = append(served, c)
	}
	poll(t, "the request's bytes arrive", func() bool { return hasUnreadBytes(served[0].Conn) })
	l.waiting = []*fairConn{{Conn: &closeRecorder{}, listener: l, address: "127.0.0.1"}}
	l.admitWaiting()
	held := l.open.byAddress["127.0.0.1"]
	if len(l.waiting) != 0 || !slices.Contains(held, served[0]) || slices.Contains(held, served[1]) {
		t.Errorf("after a handshake place freed: %d waiting, the one with a request kept its place: %t, the silent one kept its place: %t; want 0, true, false",
			len(l.waiting), slices.Contains(held, served[0]), slices.Contains(held, served[1]))
	}
}

// TestFullLeavesConnectionsInTheBacklog checks that once one address holds
// every place and the queue is full, the listener accepts no more, where
// the next would reset the oldest waiting, and accepts again once a place
// frees.
func TestFullLeavesConnectionsInTheBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := &backlog{conns: make(chan net.Conn, 3), closed: make(chan struct{})}
		l := newFairListener(inner, nil)
		l.max, l.maxWaiting = 1, 1
		handOver(l)
		go l.acceptInner()
		var clients []net.Conn
		arrive := func() {
			server, client := net.Pipe()
			clients = append(clients, client)
			inner.conns <- server
			synctest.Wait()
		}
		arrive()
		first := acceptWorking(t, l)
		arrive()
		arrive()
		l.mu.Lock()
		waiting, unaccepted := len(l.waiting), len(inner.conns)
		l.mu.Unlock()
		if waiting != 1 || unaccepted != 1 {
			t.Errorf("with the place and the queue full: %d waiting, %d left in the backlog; want 1 and 1", waiting, unaccepted)
		}
		_ = first.Close()
		synctest.Wait()
		if unaccepted := len(inner.conns); unaccepted != 0 {
			t.Errorf("once the place freed: %d left in the backlog; want 0", unaccepted)
		}
		_ = l.Close()
		for _, err := l.Accept(); err == nil; _, err = l.Accept() { // those handed over before the close
		}
		for _, c := range clients {
			_ = c.Close()
		}
		synctest.Wait()
	})
}
