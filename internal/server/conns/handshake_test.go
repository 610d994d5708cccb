package conns

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flyteorg/flyte-mpi-webhook/internal/fair"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// startTestHandshakes serves TLS handshakes on loopback with max places and
// slow as the time a handshake may take once it has one, and returns the
// address and a client's configuration.
func startTestHandshakes(t *testing.T, maxHandshakes int, slow time.Duration) (*Listener, string, *tls.Config) {
	t.Helper()
	server, client := testTLS(t)
	l := testListener(t, server, testLimits.MaxConns)
	l.handshakes, l.limits.SlowHandshake, l.limits.HandshakeTimeout = fair.NewGate(maxHandshakes), slow, 30*time.Second
	go l.acceptInner()
	t.Cleanup(func() { _ = l.Close() })
	// The server side of a handshake ends with the client's first read.
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("x"))
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return l, l.Addr().String(), client
}

// testTLS returns a server's TLS configuration with a certificate for
// localhost, and a client's that trusts it.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	ca, err := fixtures.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.IssueECDSA(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
}

// testListener returns a listener on loopback with config and maxConns,
// for the test to change and start (acceptInner).
func testListener(t *testing.T, config *tls.Config, maxConns int) *Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newListener(inner, config, testLimits)
	l.limits.MaxConns = maxConns
	return l
}

// handshakeWith makes a TLS handshake with address, and reads the byte the server sends once it is done.
func handshakeWith(address string, config *tls.Config) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", address, config)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}

// TestHandshakesInProgressAreBounded fills every place for a handshake
// with connections that send the headers of a ClientHello and no more, and checks that a new
// connection waits rather than starting a handshake beside them, and that
// once the oldest has had its place for slow, it is closed and the new
// connection's handshake completes in its place.
func TestHandshakesInProgressAreBounded(t *testing.T) {
	const places, slow = 2, 300 * time.Millisecond
	l, address, client := startTestHandshakes(t, places, slow)
	if err := handshakeWith(address, client); err != nil {
		t.Fatalf("a handshake with a free place: %v", err)
	}
	began := time.Now()
	var silent []net.Conn
	for range places {
		conn, err := net.Dial("tcp", address)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		// A ClientHello's headers, then nothing: a place, taken and held.
		if _, err := conn.Write([]byte{22, 3, 1, 0, 100, 1, 0, 0, 96}); err != nil {
			t.Fatal(err)
		}
		silent = append(silent, conn)
	}
	waitForHandshakes(t, l, places)

	if err := handshakeWith(address, client); err != nil {
		t.Fatalf("a handshake beside slow ones: %v", err)
	}
	if after := time.Since(began); after < slow {
		t.Errorf("the handshake was done %s after the silent ones began, before one had held its place for %s", after, slow)
	}
	// The oldest silent connection was closed at its deadline: its read ends.
	_ = silent[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent[0].Read(make([]byte, 1)); err == nil {
		t.Errorf("the oldest silent handshake was not closed")
	}
}

// waitForHandshakes waits until n handshakes are in progress.
func waitForHandshakes(t *testing.T, l *Listener, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		running, _ := l.handshakes.Holders()
		return running == n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d handshakes in progress: %v", n, err)
	}
}
