package conns

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

	"github.com/flyteorg/flyte-mpi-webhook/internal/fair"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// testLimits are the bounds the tests run with: the webhook's (internal/server's DefaultLimits).
var testLimits = Limits{MaxConns: 512, MaxHandshakes: 16, SlowHandshake: time.Second, HandshakeTimeout: 5 * time.Second,
	MaxClientHelloBytes: 16 << 10, QuietFloor: 250 * time.Millisecond}

// closeRecorder is a connection that records its Close, and is never read.
type closeRecorder struct {
	net.Conn
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

// TestFairListenerPlaces checks, step by step, which connections hold
// places, are handed to Accept and are closed, as others arrive and close,
// and whether the port would accept the next (full).
func TestFairListenerPlaces(t *testing.T) {
	type step struct {
		after           time.Duration // the clock moves on by it before the step
		arrives, closes string        // a connection's name: its address's letter and its number
		// doing is what the connection that arrives does from then on: "" is
		// work (a request), else silent, handshake, new or idle.
		doing    string
		admitted []string
		closed   []string // every connection the listener has closed so far
		// full: one address holds every place and none would give way to another of its.
		full bool
	}
	tests := []struct {
		name string
		max  int
		// crowded has a handshake wait for a place throughout.
		crowded bool
		steps   []step
	}{
		{"a lone address beyond the bound is left in the backlog until a place frees", 2, false, []step{
			{arrives: "a1", admitted: []string{"a1"}},
			{arrives: "a2", admitted: []string{"a2"}, full: true},
			{closes: "a1"},
			{arrives: "a3", admitted: []string{"a3"}, full: true},
		}},
		{"another address takes the busiest's oldest place at once; 1 against 1, the newcomer is reset", 2, false, []step{
			{arrives: "a1", admitted: []string{"a1"}},
			{arrives: "a2", admitted: []string{"a2"}, full: true},
			{arrives: "b1", admitted: []string{"b1"}, closed: []string{"a1"}},
			{closes: "a1", closed: []string{"a1"}}, // the reset one's own close frees no place
			{arrives: "b2", closed: []string{"a1", "b2"}},
		}},
		{"the address holding the most loses what does no work first: no byte, no request, then idle", 4, false, []step{
			{arrives: "a1", admitted: []string{"a1"}},
			{arrives: "a2", doing: "idle", admitted: []string{"a2"}},
			{arrives: "a3", doing: "new", admitted: []string{"a3"}},
			{arrives: "a4", doing: "silent", admitted: []string{"a4"}},
			{arrives: "b1", admitted: []string{"b1"}, closed: []string{"a4"}},
			{arrives: "b2", admitted: []string{"b2"}, closed: []string{"a3", "a4"}},
			{arrives: "b3", admitted: []string{"b3"}, closed: []string{"a2", "a3", "a4"}},
			{arrives: "b4", closed: []string{"a2", "a3", "a4", "b4"}},
		}},
		{"no request yet: one served gives way before one whose handshake waits or is under way", 3, false, []step{
			{arrives: "a1", doing: "idle", admitted: []string{"a1"}},
			{arrives: "a2", doing: "handshake", admitted: []string{"a2"}},
			{arrives: "a3", doing: "new", admitted: []string{"a3"}, full: true},
			{arrives: "b1", admitted: []string{"b1"}, closed: []string{"a3"}},
			{arrives: "b2", admitted: []string{"b2"}, closed: []string{"a2", "a3"}},
			{arrives: "b3", closed: []string{"a2", "a3", "b3"}},
		}},
		{"while a handshake waits for a place, its own newcomer takes only one that has sent nothing", 4, true, []step{
			{arrives: "a1", doing: "idle", admitted: []string{"a1"}},
			{arrives: "a2", doing: "handshake", admitted: []string{"a2"}},
			{arrives: "a3", doing: "new", admitted: []string{"a3"}},
			{arrives: "a4", doing: "silent", admitted: []string{"a4"}},
			{arrives: "a5", admitted: []string{"a5"}, closed: []string{"a4"}, full: true},
			{arrives: "a6", closed: []string{"a4", "a6"}, full: true},
		}},
		{"with no handshake waiting, its own newcomer takes one served with no request for QuietFloor, then one idle as long", 3, false, []step{
			{arrives: "a1", doing: "idle", admitted: []string{"a1"}},
			{arrives: "a2", doing: "handshake", admitted: []string{"a2"}},
			{arrives: "a3", doing: "new", admitted: []string{"a3"}, full: true},
			{after: 250 * time.Millisecond, arrives: "a4", doing: "new", admitted: []string{"a4"}, closed: []string{"a3"}},
			{arrives: "a5", admitted: []string{"a5"}, closed: []string{"a1", "a3"}, full: true},
			{arrives: "a6", closed: []string{"a1", "a3", "a6"}, full: true},
		}},
		{"holding every place, its own newcomer takes the place of the one idle the longest, idle for QuietFloor", 4, false, []step{
			{arrives: "a1", doing: "idle", admitted: []string{"a1"}},
			{after: 100 * time.Millisecond, arrives: "a2", doing: "idle", admitted: []string{"a2"}},
			{arrives: "a3", admitted: []string{"a3"}},
			{arrives: "a4", admitted: []string{"a4"}, full: true},
			{after: 149 * time.Millisecond, full: true},
			{after: time.Millisecond, full: false},
			{arrives: "a5", admitted: []string{"a5"}, closed: []string{"a1"}, full: true},
			{arrives: "a6", closed: []string{"a1", "a6"}, full: true},
			{after: 100 * time.Millisecond, arrives: "a7", admitted: []string{"a7"}, closed: []string{"a1", "a2", "a6"}, full: true},
		}},
		{"with a second address, the idle rule is not the newcomer's: the heavier gives way as before", 2, false, []step{
			{arrives: "a1", doing: "idle", admitted: []string{"a1"}},
			{arrives: "a2", admitted: []string{"a2"}, full: true},
			{arrives: "b1", admitted: []string{"b1"}, closed: []string{"a1"}},
			{after: time.Hour, arrives: "a3", closed: []string{"a1", "a3"}},
		}},
		{"a connection at work is not the victim while its address holds one doing nothing", 3, false, []step{
			{arrives: "a1", admitted: []string{"a1"}},
			{arrives: "a2", admitted: []string{"a2"}},
			{arrives: "a3", doing: "idle", admitted: []string{"a3"}, full: true},
			{arrives: "b1", admitted: []string{"b1"}, closed: []string{"a3"}},
			{arrives: "b2", closed: []string{"a3", "b2"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newListener(nil, nil, testLimits)
			l.limits.MaxConns = tt.max
			now := time.Unix(0, 0)
			l.now = func() time.Time { return now }
			if tt.crowded { // a handshake waits for a place throughout: the gate has none
				l.handshakes = fair.NewGate(0)
				go func() { _, _ = l.handshakes.Enter("10.0.0.h", time.Now().Add(time.Minute)) }()
				fixtures.Poll(t, "a handshake waits", func() bool { _, waiting := l.handshakes.Holders(); return waiting == 1 })
			}
			var admitted []*connection
			l.startHandshake = func(c *connection) { admitted = append(admitted, c) }
			conns := map[string]*connection{}
			recorders := map[string]*closeRecorder{}
			for i, step := range tt.steps {
				now = now.Add(step.after)
				if step.arrives != "" {
					recorders[step.arrives] = &closeRecorder{}
					conns[step.arrives] = &connection{Conn: recorders[step.arrives], listener: l, address: "10.0.0." + step.arrives[:1],
						state: map[string]fair.State{"": fair.Active, "silent": fair.Silent, "handshake": fair.Handshake, "new": fair.New, "idle": fair.Idle}[step.doing],
						since: now}
					l.place(conns[step.arrives], l.ownYieldsUpTo())
				}
				if step.closes != "" {
					l.release(conns[step.closes]) // as its Close does, which the test does not record
				}
				got := step
				l.mu.Lock()
				got.admitted, got.closed, got.full = nil, nil, l.full(l.ownYieldsUpTo())
				l.mu.Unlock()
				for _, c := range admitted {
					for name, known := range conns {
						if known == c {
							got.admitted = append(got.admitted, name)
						}
					}
				}
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
				if l.open.Total() > tt.max {
					t.Errorf("step %d: %d open, beyond %d", i, l.open.Total(), tt.max)
				}
			}
		})
	}
}

// TestConnectionStates checks the table of connections as net/http's
// ConnState feeds it: a connection is new once its handshake is done and
// until it sends a request, idle once answered, and holds no place once closed.
func TestConnectionStates(t *testing.T) {
	tcp, _, client := serveTLS(t)
	states := func() (states []fair.State) {
		tcp.mu.Lock()
		defer tcp.mu.Unlock()
		for _, held := range tcp.open.All() {
			for _, c := range held {
				states = append(states, c.state)
			}
		}
		return states
	}
	conn, err := tls.Dial("tcp", tcp.Addr().String(), client)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fixtures.Poll(t, "the connection is served, with no request yet", func() bool { return slices.Equal(states(), []fair.State{fair.New}) })
	if err := request(conn); err != nil {
		t.Fatal(err)
	}
	fixtures.Poll(t, "the connection is idle, answered", func() bool { return slices.Equal(states(), []fair.State{fair.Idle}) })
	conn.Close()
	fixtures.Poll(t, "the closed connection holds no place", func() bool { return len(states()) == 0 })
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
		l := newListener(inner, nil, testLimits)
		handOver(l)
		go l.acceptInner()
		if c, err := l.Accept(); err != nil || c.(*connection).Conn != server {
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
func handOver(l *Listener) {
	l.startHandshake = func(c *connection) {
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
		fixtures.Poll(t, "the byte arrives", func() bool { return hasUnreadBytes(server) })
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
// gives it to its address's newcomer.
func TestServedWithUnreadBytesDoesNotGiveWay(t *testing.T) {
	l := testListener(t, nil, 2)
	t.Cleanup(func() { _ = l.Close() })
	l.startHandshake = func(*connection) {}
	var served []*connection
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
		c := &connection{Conn: server, listener: l, address: "127.0.0.1", state: fair.New}
		l.open.Add(c.address, c)
		served = append(served, c)
	}
	fixtures.Poll(t, "the request's bytes arrive", func() bool { return hasUnreadBytes(served[0].Conn) })
	newcomer := &connection{Conn: &closeRecorder{}, listener: l, address: "127.0.0.1"}
	l.place(newcomer, fair.New)
	held := l.open.Held("127.0.0.1")
	if !slices.Contains(held, newcomer) || !slices.Contains(held, served[0]) || slices.Contains(held, served[1]) {
		t.Errorf("places held by the newcomer %t, the one with a request %t, the silent one %t; want true, true, false",
			slices.Contains(held, newcomer), slices.Contains(held, served[0]), slices.Contains(held, served[1]))
	}
}

// TestFullLeavesConnectionsInTheBacklog checks that once one address holds
// every place and none would give way, the listener accepts no more, where
// the next would be reset, and accepts again once a place frees.
func TestFullLeavesConnectionsInTheBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := &backlog{conns: make(chan net.Conn, 2), closed: make(chan struct{})}
		l := newListener(inner, nil, testLimits)
		l.limits.MaxConns = 1
		l.startHandshake = func(c *connection) { // it carries a request at once
			c.state = fair.Active
			go func() {
				defer l.inFlight.Done()
				l.done <- c
			}()
		}
		go l.acceptInner()
		var clients []net.Conn
		arrive := func() {
			server, client := net.Pipe()
			clients = append(clients, client)
			inner.conns <- server
			synctest.Wait()
		}
		arrive()
		first, _ := l.Accept()
		arrive()
		if unaccepted := len(inner.conns); unaccepted != 1 {
			t.Errorf("with the place taken by a connection at work: %d left in the backlog; want 1", unaccepted)
		}
		_ = first.Close()
		synctest.Wait()
		if unaccepted := len(inner.conns); unaccepted != 0 {
			t.Errorf("once the place freed: %d left in the backlog; want 0", unaccepted)
		}
		if _, err := l.Accept(); err != nil {
			t.Fatal(err)
		}
		_ = l.Close()
		for _, c := range clients {
			_ = c.Close()
		}
		if c, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept once closed = %v, %v; want net.ErrClosed", c, err)
		}
		synctest.Wait()
	})
}
