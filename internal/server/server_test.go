package server

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
)

// writeServingCert writes a self-signed certificate for 127.0.0.1 as tls.crt and tls.key.
func writeServingCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook-service"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return pool
}

func freeAddress(t *testing.T) (string, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String(), l.Addr().(*net.TCPAddr).Port
}

// TestServer runs the server as the binary does, without a kubeconfig, and
// checks what a cluster relies on: readiness once TLS is served, TLS 1.2 at
// least, no HTTP/2, the webhook's answer, and the decision metric.
func TestServer(t *testing.T) {
	certDir := t.TempDir()
	roots := writeServingCert(t, certDir)
	_, port := freeAddress(t)
	metricsAddr, _ := freeAddress(t)
	probeAddr, _ := freeAddress(t)
	cfg := DefaultConfig()
	cfg.Host, cfg.Port, cfg.CertDir = "127.0.0.1", port, certDir
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = metricsAddr, probeAddr

	mgr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	// Ready only once the webhook serves TLS; poll as a kubelet would.
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + probeAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling a probe, as a kubelet does; not synchronisation on a result
	}
	if resp, err := http.Get("http://" + probeAddr + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", resp, err)
	}

	address := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if conn, err := tls.Dial("tcp", address, &tls.Config{RootCAs: roots, MaxVersion: tls.VersionTLS11}); err == nil {
		conn.Close()
		t.Error("a TLS 1.1 client was served; want TLS 1.2 at least")
	}
	conn, err := tls.Dial("tcp", address, &tls.Config{RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if proto := conn.ConnectionState().NegotiatedProtocol; proto == "h2" {
		t.Error("HTTP/2 was negotiated; want it off by default")
	}
	conn.Close()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1",` +
		`"kind":{"group":"kubeflow.org","version":"v2beta1","kind":"MPIJob"},"operation":"CREATE","object":` +
		`{"apiVersion":"kubeflow.org/v2beta1","kind":"MPIJob","metadata":{"name":"j","labels":{"execution-id":"e","task-name":"t"},` +
		`"annotations":{"mpi.flyte.org/worker-spec-command":"/usr/sbin/sshd -De"}},` +
		`"spec":{"mpiReplicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"mpi","args":["python"]}]}}}}}}}}`
	resp, err := client.Post("https://"+address+admission.Path, "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"uid":"u-1","allowed":true`)) ||
		!bytes.Contains(body, []byte(`"patchType":"JSONPatch"`)) {
		t.Fatalf("answer %d %s", resp.StatusCode, body)
	}

	resp, err = http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`flyte_mpi_webhook_decisions_total{outcome="mutated",source="worker-spec-command"} 1`,
		`controller_runtime_webhook_requests_total{code="200",webhook="/mutate-mpijob"} 1`,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
