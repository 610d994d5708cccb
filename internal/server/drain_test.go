package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// TestShutdownDrains stops the server under a steady stream of requests on
// new connections, as the API server sends them to a pod that terminates,
// and checks: /readyz fails from the stop on; every request is answered,
// and told to close its connection, until the drain ends; then new
// connections are refused, and a request in flight still gets its answer.
func TestShutdownDrains(t *testing.T) {
	certDir := t.TempDir()
	ca, err := fixtures.WriteServingCert(certDir)
	if err != nil {
		t.Fatal(err)
	}
	port, probe := freePort(t), freePort(t)
	cfg := DefaultConfig()
	cfg.Host, cfg.Port, cfg.CertDir = "127.0.0.1", port, certDir
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "127.0.0.1:"+strconv.Itoa(probe)

	// The handler answers at once, or, for a request to /slow, once released.
	slowEntered, releaseSlow := make(chan struct{}), make(chan struct{})
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/slow" {
			close(slowEntered)
			<-releaseSlow
		}
		_, _ = io.WriteString(w, "answered")
	})
	mgr, err := New(cfg, "/fast", hook)
	if err != nil {
		t.Fatal(err)
	}
	mgr.GetWebhookServer().Register("/slow", hook)
	drainOver := make(chan time.Time)
	mgr.GetWebhookServer().(*boundedServer).drainDone = func(time.Duration) <-chan time.Time { return drainOver }
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()

	ready := func() bool {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(probe) + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	poll(t, "the webhook is ready", ready)

	address := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, DisableKeepAlives: true}}
	post := func(path string) (*http.Response, error) {
		resp, err := client.Post("https://"+address+path, "application/json", nil)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}

	// A steady stream of requests, from before the stop to the drain's end.
	var mu sync.Mutex
	var answered, failed int
	var failures []error
	loadCtx, stopLoad := context.WithCancel(context.Background())
	var load sync.WaitGroup
	load.Go(func() {
		for loadCtx.Err() == nil {
			resp, err := post("/fast")
			mu.Lock()
			if err != nil || resp.StatusCode != http.StatusOK {
				failed++
				failures = append(failures, err)
			} else {
				answered++
			}
			mu.Unlock()
		}
	})
	slowAnswer := make(chan error, 1)
	go func() {
		resp, err := post("/slow")
		if err == nil && resp.StatusCode != http.StatusOK {
			err = errors.New(resp.Status)
		}
		slowAnswer <- err
	}()
	<-slowEntered
	answeredBefore := func() int { mu.Lock(); defer mu.Unlock(); return answered }()

	stop()
	poll(t, "/readyz fails", func() bool { return !ready() })
	if ready() {
		t.Error("/readyz passed again during the drain")
	}
	// Requests during the drain are answered, and told to close their connection.
	resp, err := post("/fast")
	if err != nil || resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("a request during the drain: %v %v, want 200 and Connection: close", resp, err)
	}
	poll(t, "the stream gets answers during the drain", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return answered > answeredBefore+10
	})
	stopLoad()
	load.Wait()
	if failed > 0 {
		t.Errorf("%d of %d requests failed before the drain ended: %v", failed, failed+answered, failures)
	}

	close(drainOver)
	poll(t, "new connections are refused", func() bool {
		conn, err := net.Dial("tcp", address)
		if err == nil {
			conn.Close()
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	})
	close(releaseSlow)
	if err := <-slowAnswer; err != nil {
		t.Errorf("the request in flight when the drain ended: %v, want an answer", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("the manager: %v", err)
	}
}

// poll waits until cond holds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting until %s: %v", what, err)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// serveTLS serves on loopback as Start does, with a handler that answers
// "answered", and returns its listeners, where Serve's error will arrive,
// and a client's TLS configuration.
func serveTLS(t *testing.T) (*fairListener, <-chan error, *tls.Config) {
	t.Helper()
	server, client := testTLS(t)
	l := testListener(t, server, 4)
	l.handshakes, l.slow, l.timeout = &gate{max: 4}, 30*time.Second, 30*time.Second
	go l.acceptInner()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "answered")
	}), ConnState: l.track}
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
	conn := func() (*fairConn, *closeRecorder) {
		r := &closeRecorder{}
		return &fairConn{Conn: r, listener: l, address: "10.0.0.1", state: connActive}, r
	}
	placed, placedRecorder := conn()
	l.arrive(placed, connSilent)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	late, lateRecorder := conn()
	l.arrive(late, connSilent)

	if got, err := l.Accept(); got != placed || err != nil {
		t.Errorf("Accept after Close = %v, %v; want the connection that held a place", got, err)
	}
	if got, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept once none holds a place = %v, %v; want net.ErrClosed", got, err)
	}
	if placedRecorder.closed || !lateRecorder.closed {
		t.Errorf("closed: placed %t, arrived after Close %t; want false, true", placedRecorder.closed, lateRecorder.closed)
	}
	if l.open.total != 1 {
		t.Errorf("%d connections hold a place, want 1: the one Accept returned", l.open.total)
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
