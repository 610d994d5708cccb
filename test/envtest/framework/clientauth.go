package framework

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// ClientCAFile is the name of the client CA bundle in the cert dir of the
// server ServeClientAuth starts: its --client-ca-name, as the chart and
// config/client-auth name it.
const ClientCAFile = "client-ca.crt"

// clientAuth is the client certificate Start has the API server present,
// and where to.
type clientAuth struct {
	// ca signed the certificate.
	ca *fixtures.Authority
	// address is the host:port the admission kubeconfig gives the
	// certificate to: that of the server ServeClientAuth starts.
	address string
	port    int
	// dir holds the API server's admission configuration and kubeconfig,
	// and the cert dir of that server.
	dir string
}

// admissionConfiguration is the API server's --admission-control-config-file:
// the MutatingAdmissionWebhook plugin's WebhookAdmissionConfiguration names
// the kubeconfig whose users are the credentials it presents to webhooks,
// keyed by the webhook's host (k8s.io/apiserver, pkg/util/webhook).
const admissionConfiguration = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %s
`

// configureClientAuth has the API server that e.testEnv starts present a
// client certificate for kube-apiserver (server.DefaultClientCNName), signed
// by a CA of its own, to the webhook at host and a free port, through its
// admission kubeconfig, as a cluster's API server is configured for a
// webhook run with --client-ca-name. Webhooks at other addresses get none.
func (e *Env) configureClientAuth(host string) error {
	port, err := FreePort(host)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "envtest-client-auth-")
	if err != nil {
		return err
	}
	e.clientAuth = &clientAuth{address: net.JoinHostPort(host, strconv.Itoa(port)), port: port, dir: dir}
	if e.clientAuth.ca, err = fixtures.NewAuthority(); err != nil {
		return err
	}
	cert, err := e.clientAuth.ca.IssueClient(server.DefaultClientCNName)
	if err != nil {
		return err
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.AuthInfos[e.clientAuth.address] = &clientcmdapi.AuthInfo{ClientCertificateData: cert.CertPEM, ClientKeyData: cert.KeyPEM}
	kubeconfigPath := filepath.Join(dir, "admission-kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, kubeconfigPath); err != nil {
		return fmt.Errorf("writing the admission kubeconfig: %w", err)
	}
	configPath := filepath.Join(dir, "admission-configuration.yaml")
	if err := os.WriteFile(configPath, fmt.Appendf(nil, admissionConfiguration, kubeconfigPath), 0o600); err != nil {
		return err
	}
	e.testEnv.ControlPlane.GetAPIServer().Configure().Set("admission-control-config-file", configPath)
	return nil
}

// ServeClientAuth is ServeLabelled with a server run as with
// --client-ca-name and the default --client-cn-name: it listens at
// ClientAuthAddress, where the API server presents its client certificate,
// and its cert dir holds the serving certificate and, beside it, the CA
// that signed the API server's, as ClientCAFile. It may run once per Env.
func (e *Env) ServeClientAuth(ctx context.Context, label string, opts mutate.Options) error {
	certDir := filepath.Join(e.clientAuth.dir, "certs")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		return fmt.Errorf("the client-auth server runs once per Env: %w", err)
	}
	files := map[string][]byte{ClientCAFile: e.clientAuth.ca.CertPEM}
	for _, name := range []string{fixtures.CertFile, fixtures.KeyFile} {
		b, err := os.ReadFile(filepath.Join(e.ServingCertDir(), name))
		if err != nil {
			return err
		}
		files[name] = b
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(certDir, name), b, 0o600); err != nil {
			return err
		}
	}
	return e.serveLabelled(ctx, label, e.Webhook, opts, func(cfg *server.Config) {
		cfg.Port, cfg.CertDir, cfg.ClientCAName, cfg.ClientCNName = e.clientAuth.port, certDir, ClientCAFile, server.DefaultClientCNName
	})
}

// ClientAuthAddress is where the server ServeClientAuth starts listens.
func (e *Env) ClientAuthAddress() string { return e.clientAuth.address }

// ServingCAs holds the CA that signed the webhook servers' certificate, as
// the webhook configurations' caBundle does, for a client of a test's own.
func (e *Env) ServingCAs() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.testEnv.WebhookInstallOptions.LocalServingCAData)
	return pool
}

// removeClientAuth removes what configureClientAuth wrote.
func (e *Env) removeClientAuth() error {
	if e.clientAuth == nil {
		return nil
	}
	return os.RemoveAll(e.clientAuth.dir)
}
