package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// clientCAFile is the name the tests give the client CA bundle in the cert dir.
const clientCAFile = "client-ca.crt"

// TestClientCertificates runs the server with --client-ca-name, and checks
// that it answers a client with a certificate of the CA for the common name
// --client-cn-name gives, and refuses every other at the TLS handshake,
// before a byte of its request is read.
func TestClientCertificates(t *testing.T) {
	certDir := t.TempDir()
	servingCA, err := fixtures.WriteServingCert(certDir)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, otherCA := mustAuthority(t), mustAuthority(t)
	if err := os.WriteFile(filepath.Join(certDir, clientCAFile), clientCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	_, port := freeAddress(t)
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.CertDir, cfg.ClientCAName = "127.0.0.1", port, certDir, clientCAFile
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
	start(t, cfg)
	address := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	waitForTLS(t, address)

	job, err := fixtures.FlyteJob("v1", fixtures.HorovodWorkerCommand)
	if err != nil {
		t.Fatal(err)
	}
	review := fixtures.Review(fixtures.MustJSON(job), fixtures.MPIJob("v1"), admissionv1.Create, fixtures.UID("u-1"))
	for _, tc := range []struct {
		name string
		// cert is the client's certificate; nil presents none.
		cert       func() (*fixtures.ServingCert, error)
		maxVersion uint16
		// refused is the TLS alert the client gets; "" for an answer.
		refused string
	}{
		{name: "the API server's certificate", cert: func() (*fixtures.ServingCert, error) { return clientCA.IssueClient("kube-apiserver") }},
		{name: "the API server's certificate, TLS 1.2", cert: func() (*fixtures.ServingCert, error) { return clientCA.IssueClient("kube-apiserver") },
			maxVersion: tls.VersionTLS12},
		{name: "no certificate", refused: "tls: certificate required"},
		{name: "no certificate, TLS 1.2", maxVersion: tls.VersionTLS12, refused: "tls: handshake failure"},
		{name: "a certificate of another CA", cert: func() (*fixtures.ServingCert, error) { return otherCA.IssueClient("kube-apiserver") },
			refused: "tls: unknown certificate authority"},
		{name: "the CA's certificate for a kubelet", cert: func() (*fixtures.ServingCert, error) { return clientCA.IssueClient("system:node:worker-1") },
			refused: "tls: bad certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := &tls.Config{RootCAs: servingCA.Pool(), MaxVersion: tc.maxVersion}
			if tc.cert != nil {
				issued, err := tc.cert()
				if err != nil {
					t.Fatal(err)
				}
				cert, err := issued.TLS()
				if err != nil {
					t.Fatal(err)
				}
				config.Certificates = []tls.Certificate{cert}
			}
			if tc.refused == "" {
				client := &http.Client{Transport: &http.Transport{TLSClientConfig: config}}
				defer client.CloseIdleConnections()
				resp, err := client.Post("https://"+address+admission.Path, "application/json", bytes.NewReader(review))
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"uid":"u-1","allowed":true`)) {
					t.Fatalf("answer %d %s", resp.StatusCode, body)
				}
				return
			}
			// With TLS 1.3 the client's handshake ends before the server's
			// verdict, which the first read then gets; the client writes
			// nothing, so no reset can overtake the alert.
			conn, err := tls.Dial("tcp", address, config)
			if err == nil {
				_, err = conn.Read(make([]byte, 1))
				conn.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("got %v; want the TLS alert %q", err, tc.refused)
			}
		})
	}
}

// TestClientCANameRefusedByNew checks that New, before anything listens,
// refuses a client CA bundle it cannot use, and a common name it would
// never check, with an error that names what is wrong.
func TestClientCANameRefusedByNew(t *testing.T) {
	certDir := t.TempDir()
	if _, err := fixtures.WriteServingCert(certDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(certDir, "not-pem.crt"), []byte("MIIB...\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(certDir, "a-directory"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		caName, cn  string
		wantInError []string
	}{
		{name: "a missing file", caName: "client-ca.crt", cn: server.DefaultClientCNName,
			wantInError: []string{"--client-ca-name", filepath.Join(certDir, "client-ca.crt"), "no such file"}},
		{name: "a file that holds no PEM certificate", caName: "not-pem.crt", cn: server.DefaultClientCNName,
			wantInError: []string{"--client-ca-name", filepath.Join(certDir, "not-pem.crt"), "holds no PEM certificate"}},
		{name: "a directory", caName: "a-directory", cn: server.DefaultClientCNName,
			wantInError: []string{"--client-ca-name", "is a directory"}},
		{name: "a common name without a CA", cn: "kube-apiserver-kubelet-client",
			wantInError: []string{"--client-cn-name=kube-apiserver-kubelet-client without --client-ca-name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := server.DefaultConfig()
			cfg.Host, cfg.CertDir, cfg.ClientCAName, cfg.ClientCNName = "127.0.0.1", certDir, tc.caName, tc.cn
			cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
			_, err := server.New(cfg, server.DefaultLimits(), admission.Path, admission.NewHandler(mutate.DefaultOptions(), admission.DefaultLimits(), nil))
			if err == nil {
				t.Fatalf("New succeeded; want an error with %q", tc.wantInError)
			}
			for _, want := range tc.wantInError {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
		})
	}
}

// waitForTLS returns once the server at address accepts connections.
func waitForTLS(t *testing.T, address string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
			conn, err := net.Dial("tcp", address)
			if err != nil {
				return false, nil
			}
			return true, conn.Close()
		}); err != nil {
		t.Fatalf("%s never listened: %v", address, err)
	}
}

func mustAuthority(t *testing.T) *fixtures.Authority {
	t.Helper()
	ca, err := fixtures.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
