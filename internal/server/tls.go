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
)

// DefaultClientCNName is Config.ClientCNName's default, as Gatekeeper's --client-cn-name.
const DefaultClientCNName = "kube-apiserver"

// serverTLS builds what controller-runtime's DefaultServer.Start builds from cfg, reading every file so that a broken one fails New.
func serverTLS(cfg Config, log logr.Logger) (*tls.Config, *certwatcher.CertWatcher, error) {
	watcher, err := certwatcher.New(filepath.Join(cfg.CertDir, "tls.crt"), filepath.Join(cfg.CertDir, "tls.key"))
	if err != nil {
		return nil, nil, fmt.Errorf("loading the serving certificate from %s: %w", cfg.CertDir, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}, GetCertificate: watcher.GetCertificate}
	if cfg.EnableHTTP2 {
		c.NextProtos = []string{"h2"}
	}
	if cfg.ClientCAName == "" {
		return c, watcher, nil
	}
	path := filepath.Join(cfg.CertDir, cfg.ClientCAName)
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

var errNoClientCertificate = errors.New("no client certificate")

// requireCommonName refuses a client certificate whose common name is not name: the cluster's CA signs
// every kubelet's and user's too. Only the CA's get this far, so a refusal is logged: a misissued one.
func requireCommonName(name string, log logr.Logger) func(tls.ConnectionState) error {
	return func(state tls.ConnectionState) error {
		if len(state.PeerCertificates) == 0 {
			return errNoClientCertificate // fails the check closed, should a connection without one reach it
		}
		if got := state.PeerCertificates[0].Subject.CommonName; got != name {
			log.Info("refused a client certificate the client CA signed: its common name is not --client-cn-name",
				"commonName", got, "want", name, "serial", state.PeerCertificates[0].SerialNumber.String())
			return fmt.Errorf("the client certificate's common name is %q, not %q", got, name)
		}
		return nil
	}
}
