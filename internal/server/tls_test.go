package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// startTestHandshakes serves TLS handshakes on loopback with max places and
// slow as the time a handshake may take once it has one, and returns the
// address and a client's configuration.
func startTestHandshakes(t *testing.T, maxHandshakes int, slow time.Duration) (*fairListener, string, *tls.Config) {
	t.Helper()
	server, client := testTLS(t)
	l := testListener(t, server, MaxConns)
	l.handshakes, l.slow, l.timeout = &gate{max: maxHandshakes}, slow, 30*time.Second
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
func testListener(t *testing.T, config *tls.Config, maxConns int) *fairListener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newFairListener(inner, config)
	l.max = maxConns
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
func waitForHandshakes(t *testing.T, l *fairListener, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		l.handshakes.mu.Lock()
		defer l.handshakes.mu.Unlock()
		return l.handshakes.running.total == n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d handshakes in progress: %v", n, err)
	}
}

// TestServerTLS checks the TLS configuration built from the Config and the
// webhook Options: the certificate and key names, HTTP/2 only when asked
// for, TLS 1.2 at least, and with a client CA bundle the common name check.
func TestServerTLS(t *testing.T) {
	ca, err := fixtures.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	issued, err := ca.IssueECDSA(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, content := range map[string][]byte{"serving.pem": issued.CertPEM, "serving-key.pem": issued.KeyPEM, "clients.pem": ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files := webhook.Options{CertDir: dir, CertName: "serving.pem", KeyName: "serving-key.pem"}
	withCA := files
	withCA.ClientCAName = "clients.pem"

	for _, tc := range []struct {
		name       string
		config     Config
		options    webhook.Options
		nextProtos []string
		clientAuth tls.ClientAuthType
		// checksName: a client certificate's common name is checked.
		checksName bool
	}{
		{name: "the files CertName and KeyName name, HTTP/1.1", options: files, nextProtos: []string{"http/1.1"}},
		{name: "HTTP/2 when asked for", config: Config{EnableHTTP2: true}, options: files, nextProtos: []string{"h2"}},
		{name: "a client CA bundle and a common name", config: Config{ClientCNName: "kube-apiserver"}, options: withCA,
			nextProtos: []string{"http/1.1"}, clientAuth: tls.RequireAndVerifyClientCert, checksName: true},
		{name: "a client CA bundle, any common name", options: withCA,
			nextProtos: []string{"http/1.1"}, clientAuth: tls.RequireAndVerifyClientCert},
		{name: "no client CA: no common name is checked", config: Config{ClientCNName: "kube-apiserver"}, options: files,
			nextProtos: []string{"http/1.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, watcher, err := serverTLS(tc.config, tc.options, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			if watcher == nil {
				t.Errorf("no certificate watcher")
			}
			if strings.Join(cfg.NextProtos, ",") != strings.Join(tc.nextProtos, ",") || cfg.MinVersion != tls.VersionTLS12 {
				t.Errorf("NextProtos %q, MinVersion %x; want %q, TLS 1.2", cfg.NextProtos, cfg.MinVersion, tc.nextProtos)
			}
			served, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
			if err != nil {
				t.Fatal(err)
			}
			if leaf, err := x509.ParseCertificate(served.Certificate[0]); err != nil || !leaf.Equal(issued.Cert) {
				t.Errorf("serves %v (%v); want the issued certificate", leaf, err)
			}
			if cfg.ClientAuth != tc.clientAuth {
				t.Errorf("ClientAuth %v, want %v", cfg.ClientAuth, tc.clientAuth)
			}
			if tc.clientAuth != tls.NoClientCert && (cfg.ClientCAs == nil || !cfg.ClientCAs.Equal(ca.Pool())) {
				t.Errorf("ClientCAs do not hold the bundle's CA alone")
			}
			if got := cfg.VerifyConnection != nil; got != tc.checksName {
				t.Errorf("checks the common name: %t, want %t", got, tc.checksName)
			}
		})
	}
}

// TestRequireCommonName checks the common name check, and that it logs the
// name it refused.
func TestRequireCommonName(t *testing.T) {
	ca, err := fixtures.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	log := funcr.New(func(prefix, args string) { logged = append(logged, args) }, funcr.Options{})
	verify := requireCommonName("kube-apiserver", log)
	for _, tc := range []struct {
		name      string
		cn        string
		none      bool
		wantError string
		wantLog   string
	}{
		{name: "the API server's", cn: "kube-apiserver"},
		{name: "a kubelet's", cn: "system:node:worker-1",
			wantError: `the client certificate's common name is "system:node:worker-1", not "kube-apiserver"`, wantLog: `"commonName"="system:node:worker-1"`},
		{name: "a prefix of the name", cn: "kube-apiserver-kubelet-client", wantError: `"kube-apiserver-kubelet-client", not`},
		{name: "none: the check fails closed", none: true, wantError: errNoClientCertificate.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logged = nil
			var state tls.ConnectionState
			if !tc.none {
				cert, err := ca.IssueClient(tc.cn)
				if err != nil {
					t.Fatal(err)
				}
				state.PeerCertificates = []*x509.Certificate{cert.Cert}
			}
			err := verify(state)
			switch {
			case tc.wantError == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.wantError != "" && (err == nil || !strings.Contains(err.Error(), tc.wantError)):
				t.Errorf("got %v; want an error with %q", err, tc.wantError)
			case tc.none && !errors.Is(err, errNoClientCertificate):
				t.Errorf("got %v; want errNoClientCertificate", err)
			}
			if tc.wantLog != "" && (len(logged) != 1 || !strings.Contains(logged[0], tc.wantLog)) {
				t.Errorf("logged %q; want one line with %s", logged, tc.wantLog)
			}
			if tc.wantError == "" && len(logged) > 0 {
				t.Errorf("logged %q for a certificate it took", logged)
			}
		})
	}
}
