package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// TestServerTLS checks the TLS configuration built from the Config: the
// certificate and key of --cert-dir, HTTP/2 only when asked for, TLS 1.2 at
// least, and with a client CA bundle the common name check.
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
	for name, content := range map[string][]byte{"tls.crt": issued.CertPEM, "tls.key": issued.KeyPEM, "clients.pem": ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name       string
		config     Config
		nextProtos []string
		clientAuth tls.ClientAuthType
		// checksName: a client certificate's common name is checked.
		checksName bool
	}{
		{name: "tls.crt and tls.key, HTTP/1.1", nextProtos: []string{"http/1.1"}},
		{name: "HTTP/2 when asked for", config: Config{EnableHTTP2: true}, nextProtos: []string{"h2"}},
		{name: "a client CA bundle and a common name", config: Config{ClientCAName: "clients.pem", ClientCNName: "kube-apiserver"},
			nextProtos: []string{"http/1.1"}, clientAuth: tls.RequireAndVerifyClientCert, checksName: true},
		{name: "a client CA bundle, any common name", config: Config{ClientCAName: "clients.pem"},
			nextProtos: []string{"http/1.1"}, clientAuth: tls.RequireAndVerifyClientCert},
		{name: "no client CA: no common name is checked", config: Config{ClientCNName: "kube-apiserver"},
			nextProtos: []string{"http/1.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.config.CertDir = dir
			cfg, watcher, err := serverTLS(tc.config, logr.Discard())
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
