package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// The bounds on TLS handshakes: docs/RELIABILITY.md has why each is what it is.
const (
	// MaxHandshakes bounds the TLS handshakes in progress, shared among client addresses (gate).
	MaxHandshakes = 16

	// SlowHandshake is how long a handshake may hold its place: the API server's takes a round trip or two.
	SlowHandshake = time.Second

	// HandshakeTimeout bounds the time from a connection's accept to the end of its handshake, waiting included.
	HandshakeTimeout = ReadHeaderTimeout

	// MaxClientHelloBytes bounds a ClientHello, where crypto/tls would buffer up to 64 KiB for each connection.
	MaxClientHelloBytes = 16 << 10
)

// tlsHandshakeErrors counts the handshakes that failed or found no place (Help): a scan or a flood, not logged.
var tlsHandshakeErrors = promauto.With(metrics.Registry).NewCounter(prometheus.CounterOpts{
	Name: "flyte_mpi_webhook_tls_handshake_errors_total",
	Help: "TLS handshakes on the webhook port that failed, took longer than 1 s once they had a place, or found no place in time.",
})

// handshake makes c's handshake once the gate lets it, and hands it to
// Accept before its deadline.
func (l *fairListener) handshake(c *fairConn) {
	defer l.inFlight.Done()
	fail := func() {
		tlsHandshakeErrors.Inc()
		_ = c.Close()
	}
	deadline := time.Now().Add(l.timeout)
	_ = c.SetDeadline(deadline)
	// A connection that sends nothing takes no place among the handshakes.
	first := make([]byte, helloHeaders)
	if _, err := io.ReadFull(c, first); err != nil || helloTooLarge(first) {
		fail()
		return
	}
	c.first = first
	l.sentByte(c)
	ticket, err := l.handshakes.enter(c.address, deadline)
	if err != nil {
		fail()
		return
	}
	if slow := time.Now().Add(l.slow); slow.Before(deadline) {
		_ = c.SetDeadline(slow)
	}
	tlsConn := tls.Server(c, l.config)
	err = tlsConn.HandshakeContext(context.Background())
	l.handshakes.leave(ticket)
	l.handshaken()
	if err != nil {
		fail()
		return
	}
	_ = c.SetDeadline(time.Time{}) // http.Server sets its own
	select {
	case l.done <- tlsConn:
	case <-time.After(l.timeout): // nothing calls Accept any more: its server has stopped
		_ = c.Close()
	}
}

// helloHeaders is what handshake reads before the handshake: a TLS record's header (5 bytes) and its message's (4).
const helloHeaders = 9

// helloTooLarge says whether the first bytes of a connection declare a
// ClientHello above MaxClientHelloBytes, before crypto/tls buffers it.
func helloTooLarge(headers []byte) bool {
	const recordHandshake, clientHello = 22, 1
	length := int(headers[6])<<16 | int(headers[7])<<8 | int(headers[8])
	return headers[0] == recordHandshake && headers[5] == clientHello && length > MaxClientHelloBytes
}

// DefaultClientCNName is the common name a client certificate must carry by
// default once --client-ca-name is set, as Gatekeeper's flag of that name.
const DefaultClientCNName = "kube-apiserver"

// serverTLS builds the webhook port's TLS configuration from cfg and from o,
// the webhook Options with their defaults (CertName, KeyName): what
// controller-runtime's DefaultServer.Start builds from the same settings,
// without the bounds its tls.Listen lacks. Every file is read here, so that
// a broken one fails New, and only here: a new client CA needs a restart;
// the certificate is reloaded by the watcher it returns.
func serverTLS(cfg Config, o webhook.Options, log logr.Logger) (*tls.Config, *certwatcher.CertWatcher, error) {
	watcher, err := certwatcher.New(filepath.Join(o.CertDir, o.CertName), filepath.Join(o.CertDir, o.KeyName))
	if err != nil {
		return nil, nil, fmt.Errorf("loading the serving certificate from %s: %w", o.CertDir, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}, GetCertificate: watcher.GetCertificate}
	if cfg.EnableHTTP2 {
		c.NextProtos = []string{"h2"}
	}
	if o.ClientCAName == "" {
		return c, watcher, nil
	}
	path := filepath.Join(o.CertDir, o.ClientCAName)
	bundle, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the client CA bundle (--client-ca-name): %w", err)
	}
	c.ClientCAs, c.ClientAuth = x509.NewCertPool(), tls.RequireAndVerifyClientCert
	if !c.ClientCAs.AppendCertsFromPEM(bundle) {
		return nil, nil, fmt.Errorf("the client CA bundle %s (--client-ca-name) holds no PEM certificate", path)
	}
	if cfg.ClientCNName != "" {
		c.VerifyConnection = requireCommonName(cfg.ClientCNName, log)
	}
	return c, watcher, nil
}

// errNoClientCertificate fails the common name check closed, should a connection without a certificate reach it.
var errNoClientCertificate = errors.New("no client certificate")

// requireCommonName refuses a client certificate, verified by the CA, whose
// common name is not name: the cluster's CA signs every kubelet's and
// user's too. The refusal is logged, for only the CA's certificates get
// this far: a misissued one, not a scan.
func requireCommonName(name string, log logr.Logger) func(tls.ConnectionState) error {
	return func(state tls.ConnectionState) error {
		if len(state.PeerCertificates) == 0 {
			return errNoClientCertificate
		}
		if got := state.PeerCertificates[0].Subject.CommonName; got != name {
			log.Info("refused a client certificate the client CA signed: its common name is not --client-cn-name",
				"commonName", got, "want", name, "serial", state.PeerCertificates[0].SerialNumber.String())
			return fmt.Errorf("the client certificate's common name is %q, not %q", got, name)
		}
		return nil
	}
}
