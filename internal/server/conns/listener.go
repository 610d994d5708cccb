package conns

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flyteorg/flyte-mpi-webhook/internal/fair"
)

// Listener is the webhook port's one accept loop and table of connections. It accepts every connection at
// once but when full (waitForRoom), so that the API server's never waits in the kernel's backlog behind a
// flood, makes their TLS handshakes, and hands net/http those done.
type Listener struct {
	net.Listener
	limits Limits

	mu      sync.Mutex
	open    fair.Shares[*connection]
	room    sync.Cond // wakes the accept loop when full may have changed
	changes uint64    // counts what may change full: a state, Close, a handshake's end, a timer's wake
	closed  bool
	held    []*connection // the accept loop's last snapshot (snapshot)
	read    []fair.Conn

	config     *tls.Config
	handshakes *fair.Gate
	// startHandshake is go handshake, and now time.Now, or the tests' own.
	startHandshake func(*connection)
	now            func() time.Time
	inFlight       sync.WaitGroup // the handshakes not done
	done           chan net.Conn  // the handshakes done; closed once the TCP listener is and none is in flight
}

// Listen listens on address for TLS connections with config, within limits.
func Listen(address string, config *tls.Config, limits Limits) (*Listener, error) {
	inner, err := (&net.ListenConfig{Control: deferAccept(limits.HandshakeTimeout)}).Listen(context.Background(), "tcp", address)
	if err != nil {
		return nil, err
	}
	l := newListener(inner, config, limits)
	go l.acceptInner()
	return l, nil
}

func newListener(inner net.Listener, config *tls.Config, limits Limits) *Listener {
	l := &Listener{Listener: inner, limits: limits, config: config, handshakes: fair.NewGate(limits.MaxHandshakes),
		done: make(chan net.Conn), now: time.Now}
	l.startHandshake = func(c *connection) { go l.handshake(c) }
	l.room.L = &l.mu
	return l
}

// acceptInner accepts until the TCP listener is closed.
func (l *Listener) acceptInner() {
	defer func() {
		l.inFlight.Wait()
		close(l.done)
	}()
	backoff := time.Duration(0)
	for {
		l.mu.Lock()
		ownUpTo := l.waitForRoom()
		l.mu.Unlock()
		conn, err := l.Listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // too many open files: this loop backs off alone
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		c := &connection{Conn: conn, listener: l, address: fair.ClientAddress(conn.RemoteAddr().String())}
		if hasUnreadBytes(conn) {
			c.state = fair.Handshake
		}
		l.place(c, ownUpTo)
	}
}

// Accept returns the next connection whose handshake is done; once closed, those under way, then net.ErrClosed.
func (l *Listener) Accept() (net.Conn, error) {
	if conn, ok := <-l.done; ok {
		return conn, nil
	}
	return nil, net.ErrClosed
}

// place gives c a place, the place of one that gives way if need be, and starts its handshake; it resets
// c when none gives way, and after Close, as the kernel resets its backlog. The one that gives way is
// chosen with l.mu let go (giveWay), then taken only if it is still as it was, else chosen again.
func (l *Listener) place(c *connection, ownUpTo fair.State) {
	l.mu.Lock()
	var victim *connection
	var was fair.Conn
	for !l.closed && l.open.Total() >= l.limits.MaxConns {
		if victim != nil && victim.state == was.State && victim.since.Equal(was.Since) && l.open.Remove(victim.address, victim) {
			l.setState(victim, fair.Closed)
			defer victim.reset()
			break
		}
		if victim, was = l.giveWay(c.address, ownUpTo); victim == nil {
			break
		}
	}
	if l.closed || l.open.Total() >= l.limits.MaxConns {
		l.mu.Unlock()
		c.reset()
		return
	}
	l.open.Add(c.address, c)
	l.inFlight.Add(1)
	l.startHandshake(c)
	l.mu.Unlock()
}

func (l *Listener) release(c *connection) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setState(c, fair.Closed)
	l.open.Remove(c.address, c)
}

func (l *Listener) wakeAcceptLoop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changed()
}

// changed wakes the accept loop: full may have changed.
func (l *Listener) changed() {
	l.changes++
	l.room.Broadcast()
}

// Close stops accepting TCP connections; those that hold a place still reach Accept: their client is sending its request.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.changed()
	l.mu.Unlock()
	return l.Listener.Close()
}

// ConnState is the ConnState hook of l's http.Server, called as each connection changes state.
func (l *Listener) ConnState(conn net.Conn, state http.ConnState) {
	tlsConn, ok := conn.(*tls.Conn)
	if !ok {
		return
	}
	if c, ok := tlsConn.NetConn().(*connection); ok {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.setState(c, fromHTTP[state])
	}
}

var fromHTTP = map[http.ConnState]fair.State{http.StateNew: fair.New, http.StateActive: fair.Active,
	http.StateIdle: fair.Idle, http.StateHijacked: fair.Closed, http.StateClosed: fair.Closed}

// setState is where a state changes, after acceptInner gives the first; it wakes the accept loop (full).
func (l *Listener) setState(c *connection, state fair.State) {
	c.state, c.since = state, l.now()
	l.changed()
}

// WaitForRequests returns once every connection served has sent a request or closed, or when ctx ends.
func (l *Listener) WaitForRequests(ctx context.Context) {
	_ = wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, held := range l.open.All() {
			if slices.ContainsFunc(held, func(c *connection) bool { return c.state == fair.New }) {
				return false, nil
			}
		}
		return true, nil
	})
}

type connection struct {
	net.Conn
	listener *Listener
	address  string
	state    fair.State
	since    time.Time // when it entered state
	first    []byte    // what handshake read before the handshake, to be read again
}

func (c *connection) Read(p []byte) (int, error) {
	if len(c.first) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.first)
	c.first = c.first[n:]
	return n, nil
}

// reset closes c with a reset, which the kernel frees at once, unlike an orderly close.
func (c *connection) reset() {
	if tcp, ok := c.Conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Conn.Close()
}

func (c *connection) Close() error {
	c.listener.release(c)
	return c.Conn.Close()
}
