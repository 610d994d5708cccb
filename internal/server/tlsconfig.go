package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// DefaultClientCNName is the common name a client certificate must carry by
// default once --client-ca-name is set: Gatekeeper's default for its flag of
// the same name, and the name an API server's client certificate is
// commonly issued for.
const DefaultClientCNName = "kube-apiserver"

// serverTLS builds the TLS configuration the webhook serves with from o,
// as controller-runtime's DefaultServer.Start builds it from the same
// Options: HTTP/2 offered, then o.TLSOpts in order; unless they set
// GetCertificate, the certificate o.CertName and the key o.KeyName in
// o.CertDir, reloaded by the watcher it returns (nil otherwise) once that
// is started; and, with o.ClientCAName, a client certificate signed by the
// CA bundle of that name in o.CertDir required of every client. Start cannot
// be DefaultServer's own, which listens with tls.Listen, without the bounds.
// Every file is read here, so that a missing or broken one fails New, before
// anything listens.
func serverTLS(o webhook.Options) (*tls.Config, *certwatcher.CertWatcher, error) {
	cfg := &tls.Config{NextProtos: []string{"h2"}}
	for _, opt := range o.TLSOpts {
		opt(cfg)
	}
	var watcher *certwatcher.CertWatcher
	if cfg.GetCertificate == nil {
		var err error
		if watcher, err = certwatcher.New(filepath.Join(o.CertDir, o.CertName), filepath.Join(o.CertDir, o.KeyName)); err != nil {
			return nil, nil, fmt.Errorf("loading the serving certificate from %s: %w", o.CertDir, err)
		}
		cfg.GetCertificate = watcher.GetCertificate
	}
	if o.ClientCAName != "" {
		pool, err := clientCAs(filepath.Join(o.CertDir, o.ClientCAName))
		if err != nil {
			return nil, nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, watcher, nil
}

// clientCAs reads the PEM certificates of the client CA bundle at path. It
// is read once: a new CA reaches the webhook when its pod restarts.
func clientCAs(path string) (*x509.CertPool, error) {
	bundle, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the client CA bundle (--client-ca-name): %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return nil, fmt.Errorf("the client CA bundle %s (--client-ca-name) holds no PEM certificate", path)
	}
	return pool, nil
}

// errNoClientCertificate refuses a connection that reaches the common name
// check without a certificate, which RequireAndVerifyClientCert refuses
// before: the check fails closed.
var errNoClientCertificate = errors.New("no client certificate")

// requireCommonName is a TLS option that refuses a client certificate whose
// subject's common name is not name, once the CA has verified it: a CA such
// as the cluster's also signs every kubelet's and every user's client
// certificate, and of those only the API server's carries its name. Such a
// refusal is logged, for only the CA's certificates get this far: it is
// what a misissued API server certificate looks like, not a scan.
func requireCommonName(name string, log logr.Logger) func(*tls.Config) {
	return func(c *tls.Config) {
		c.VerifyConnection = func(state tls.ConnectionState) error {
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
}
