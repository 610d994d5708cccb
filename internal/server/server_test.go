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
	"fmt"
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
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

// writeServingCert writes a self-signed certificate for 127.0.0.1 as tls.crt and tls.key.
func writeServingCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "webhook-service"},
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

// start runs the server New builds from cfg until the test ends.
func start(t *testing.T, cfg Config) {
	t.Helper()
	mgr, err := New(cfg, admission.Path, admission.NewHandler(mutate.DefaultOptions()))
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
	start(t, cfg)

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

// mountLikeKubelet lays out certificate files the way the kubelet mounts a
// Secret, and replaces them the way it does when cert-manager renews it:
// files in a timestamped directory, ..data a symlink to it, tls.crt and
// tls.key symlinks through ..data, and an atomic rename of ..data.
type mountLikeKubelet struct {
	t       *testing.T
	dir     string
	version int
}

// publish writes a new certificate and key, and adds the certificate to roots.
func (m *mountLikeKubelet) publish(roots *x509.CertPool) {
	m.t.Helper()
	m.version++
	stamped := fmt.Sprintf("..2026_11_30_00_00_%02d.%d", m.version, m.version)
	if err := os.Mkdir(filepath.Join(m.dir, stamped), 0o700); err != nil {
		m.t.Fatal(err)
	}
	writeServingCert(m.t, filepath.Join(m.dir, stamped))
	certPEM, err := os.ReadFile(filepath.Join(m.dir, stamped, "tls.crt"))
	if err != nil || !roots.AppendCertsFromPEM(certPEM) {
		m.t.Fatalf("reading back the certificate: %v", err)
	}
	if err := os.Symlink(stamped, filepath.Join(m.dir, "..data_tmp")); err != nil {
		m.t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(m.dir, "..data_tmp"), filepath.Join(m.dir, "..data")); err != nil {
		m.t.Fatal(err)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		link := filepath.Join(m.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				m.t.Fatal(err)
			}
		}
	}
}

// TestCertificateRotation replaces the serving certificate as cert-manager
// and the kubelet do, under a steady stream of requests on new connections,
// and checks that the server serves the new certificate without a single
// failed request.
func TestCertificateRotation(t *testing.T) {
	mount := &mountLikeKubelet{t: t, dir: t.TempDir()}
	roots := x509.NewCertPool()
	mount.publish(roots)
	_, port := freeAddress(t)
	cfg := DefaultConfig()
	cfg.Host, cfg.Port, cfg.CertDir = "127.0.0.1", port, mount.dir
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
	start(t, cfg)

	address := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	served := func() (*x509.Certificate, error) { // the certificate a new connection gets
		conn, err := tls.Dial("tcp", address, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the certificate only
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	var before *x509.Certificate
	var err error
	for deadline := time.Now().Add(30 * time.Second); before == nil; {
		if before, err = served(); err != nil && time.Now().After(deadline) {
			t.Fatalf("never served: %v", err)
		}
	}

	// Requests on new connections, trusting the old and the new certificate
	// as the caBundle does while cert-manager's CA injector catches up, until
	// new connections get the new certificate.
	mount.publish(roots)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"kubeflow.org","version":"v1","kind":"MPIJob"},"operation":"DELETE"}}`
	var requests, failures int
	var after *x509.Certificate
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := client.Post("https://"+address+admission.Path, "application/json", strings.NewReader(review))
		requests++
		if err != nil {
			failures++
			t.Errorf("request %d: %v", requests, err)
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failures++
				t.Errorf("request %d: status %d", requests, resp.StatusCode)
			}
		}
		if after, err = served(); err == nil && !after.Equal(before) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new certificate was not served within 30 s (%d requests)", requests)
		}
	}
	if failures > 0 {
		t.Fatalf("%d of %d requests failed during the rotation", failures, requests)
	}
	t.Logf("rotated after %d requests, none failed; serial %s -> %s", requests, before.SerialNumber, after.SerialNumber)
}
