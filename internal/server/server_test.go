package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
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

func freeAddress(t *testing.T) (string, int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String(), l.Addr().(*net.TCPAddr).Port
}

// start runs the server New builds from cfg until the test ends, with no drain.
func start(t *testing.T, cfg server.Config) {
	t.Helper()
	cfg.ShutdownDrain = 0
	mgr, err := server.New(cfg, server.DefaultLimits(), admission.Path, admission.NewHandler(mutate.DefaultOptions(), admission.DefaultLimits(), nil))
	if err != nil {
		t.Fatal(err)
	}
	fixtures.Run(t, mgr)
}

// TestServer runs the server as the binary does, without a kubeconfig, and
// checks what a cluster relies on: readiness once TLS is served, TLS 1.2 at
// least, no HTTP/2, the webhook's answer, and the decision metric.
func TestServer(t *testing.T) {
	certDir := t.TempDir()
	ca, err := fixtures.WriteServingCert(certDir)
	if err != nil {
		t.Fatal(err)
	}
	roots := ca.Pool()
	_, port := freeAddress(t)
	metricsAddr, _ := freeAddress(t)
	probeAddr, _ := freeAddress(t)
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.CertDir = "127.0.0.1", port, certDir
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = metricsAddr, probeAddr
	start(t, cfg)

	// Ready only once the webhook serves TLS; poll as a kubelet would.
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
			resp, err := http.Get("http://" + probeAddr + "/readyz")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		}); err != nil {
		t.Fatalf("never ready: %v", err)
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
	// A Flyte MPIJob with the task's custom, as flytepropeller creates it.
	job, err := fixtures.FlyteJob("v2beta1", fixtures.HorovodNoWorkerCommand)
	if err != nil {
		t.Fatal(err)
	}
	job.SetAnnotations(map[string]string{mutate.AnnotationTaskCustom: fixtures.FlytekitCustom})
	review := string(fixtures.Review(fixtures.MustJSON(job), fixtures.MPIJob("v2beta1"), admissionv1.Create, fixtures.UID("u-1")))
	// The metrics are the process's: other tests, and earlier runs of this one, count too.
	counted := []string{
		`flyte_mpi_webhook_decisions_total{outcome="mutated",source="task-custom"}`,
		`controller_runtime_webhook_requests_total{code="200",webhook="/mutate-mpijob"}`,
	}
	before := map[string]float64{}
	for _, series := range counted {
		before[series] = counter(t, metricsAddr, series)
	}
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

	// Headers beyond MaxHeaderBytes (and net/http's 4 KiB of slack) are refused.
	req, err := http.NewRequest(http.MethodPost, "https://"+address+admission.Path, strings.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Padding", strings.Repeat("x", 2*server.DefaultLimits().MaxHeaderBytes))
	if resp, err := client.Do(req); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("headers of %d bytes: %v %v, want 431", 2*server.DefaultLimits().MaxHeaderBytes, resp, err)
	}

	for _, series := range counted {
		if got := counter(t, metricsAddr, series) - before[series]; got != 1 {
			t.Errorf("%s grew by %v, want 1", series, got)
		}
	}
}

// counter returns the value of a metric series the server exports, 0 when it has none.
func counter(t *testing.T, metricsAddr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(metrics), "\n") {
		if value, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// TestCertificateRotation replaces the serving certificate as cert-manager
// and the kubelet do, under a steady stream of requests on new connections,
// and checks that the server serves the new certificate without a single
// failed request.
func TestCertificateRotation(t *testing.T) {
	// One CA issues both certificates, as cert-manager's Issuer does, so the
	// client trusts the new one as it trusted the old.
	ca, err := fixtures.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	publish := func() {
		cert, err := ca.Issue(time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := fixtures.Mount(certDir, cert); err != nil {
			t.Fatal(err)
		}
	}
	publish()
	_, port := freeAddress(t)
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.CertDir = "127.0.0.1", port, certDir
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", "0"
	start(t, cfg)

	address := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	served := func() (*x509.Certificate, error) { // the certificate a new connection gets
		conn, err := tls.Dial("tcp", address, &tls.Config{InsecureSkipVerify: true}) // reads the certificate only
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	var before *x509.Certificate
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
			before, err = served()
			return err == nil, nil
		}); err != nil {
		t.Fatalf("never served: %v", err)
	}

	// Requests on new connections, trusting the CA as the caBundle does,
	// until new connections get the new certificate.
	publish()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, DisableKeepAlives: true}}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"kubeflow.org","version":"v1","kind":"MPIJob"},"operation":"DELETE"}}`
	var requests, failures int
	var after *x509.Certificate
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
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
			after, err = served()
			return err == nil && !after.Equal(before), nil
		}); err != nil {
		t.Fatalf("the new certificate was not served within 30 s (%d requests): %v", requests, err)
	}
	if failures > 0 {
		t.Fatalf("%d of %d requests failed during the rotation", failures, requests)
	}
	t.Logf("rotated after %d requests, none failed; serial %s -> %s", requests, before.SerialNumber, after.SerialNumber)
}
