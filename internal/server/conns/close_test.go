package conns

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/internal/fair"
)

// serveTLS serves on loopback as Start does, with a handler that answers
// "answered", and returns its listeners, where Serve's error will arrive,
// and a client's TLS configuration.
func serveTLS(t *testing.T) (*Listener, <-chan error, *tls.Config) {
	t.Helper()
	server, client := testTLS(t)
	l := testListener(t, server, 4)
	l.handshakes, l.limits.SlowHandshake, l.limits.HandshakeTimeout = fair.NewGate(4), 30*time.Second, 30*time.Second
	go l.acceptInner()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "answered")
	}), ConnState: l.ConnState}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l, served, client
}

// TestCloseServesHandshakesUnderWay closes the listeners while a
// connection's handshake is under way, as the drain's end does, and checks
// that new connections are refused, that the request on that connection is
// still answered, and that Serve returns only then.
func TestCloseServesHandshakesUnderWay(t *testing.T) {
	l, served, client := serveTLS(t)
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	// The client sends its ClientHello, and reads the server's answer only
	// once the listener is closed: the server's side of the handshake is under way.
	held := &heldConn{Conn: raw, release: make(chan struct{})}
	answered := make(chan error, 1)
	go func() { answered <- request(tls.Client(held, client)) }()
	waitForHandshakes(t, l, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.Dial("tcp", l.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		if conn != nil {
			conn.Close()
		}
		t.Errorf("a connection after Close: %v, want connection refused", err)
	}
	close(held.release)
	if err := <-answered; err != nil {
		t.Errorf("the request on the connection whose handshake was under way at Close: %v, want an answer", err)
	}
	if err := <-served; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve returned %v, want net.ErrClosed once no handshake is under way", err)
	}
}

// TestFairListenerClose checks what Close does to the connections the
// listener holds: one with a place still reaches Accept, and one arriving
// after Close is closed, holding no place.
func TestFairListenerClose(t *testing.T) {
	l := testListener(t, nil, 1)
	handOver(l)
	go l.acceptInner()
	conn := func() (*connection, *closeRecorder) {
		r := &closeRecorder{}
		return &connection{Conn: r, listener: l, address: "10.0.0.1", state: fair.Active}, r
	}
	placed, placedRecorder := conn()
	l.place(placed, fair.Silent)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	late, lateRecorder := conn()
	l.place(late, fair.Silent)

	if got, err := l.Accept(); got != placed || err != nil {
		t.Errorf("Accept after Close = %v, %v; want the connection that held a place", got, err)
	}
	if got, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept once none holds a place = %v, %v; want net.ErrClosed", got, err)
	}
	if placedRecorder.closed || !lateRecorder.closed {
		t.Errorf("closed: placed %t, arrived after Close %t; want false, true", placedRecorder.closed, lateRecorder.closed)
	}
	if l.open.Total() != 1 {
		t.Errorf("%d connections hold a place, want 1: the one Accept returned", l.open.Total())
	}
}

// request sends a request on conn and reads its answer, which must be the
// one serveTLS's handler gives.
func request(conn net.Conn) error {
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req, err := http.NewRequest(http.MethodPost, "https://localhost/", nil)
	if err != nil {
		return err
	}
	if err := req.Write(conn); err != nil {
		return fmt.Errorf("writing the request: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "answered" {
		return fmt.Errorf("answer %s %q, want 200 answered", resp.Status, body)
	}
	return nil
}

// heldConn is a client's connection whose reads wait until release is closed.
type heldConn struct {
	net.Conn
	release chan struct{}
}

func (c *heldConn) Read(p []byte) (int, error) {
	<-c.release
	return c.Conn.Read(p)
}
