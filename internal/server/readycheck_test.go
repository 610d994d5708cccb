package server_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// TestReadyCheck holds /readyz to Config.ReadyCheck (cmd/webhook's with
// --cert-secret): unready, naming the check, while it fails; ready once it
// passes. ServedCertificate is the certificate of the cert dir.
func TestReadyCheck(t *testing.T) {
	certDir := t.TempDir()
	if _, err := fixtures.WriteServingCert(certDir); err != nil {
		t.Fatal(err)
	}
	_, port := freeAddress(t)
	probeAddr, _ := freeAddress(t)
	var trusted atomic.Bool
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.CertDir = "127.0.0.1", port, certDir
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = "0", probeAddr
	cfg.ReadyCheck = func(*http.Request) error {
		if !trusted.Load() {
			return errors.New("the caBundle does not trust it")
		}
		return nil
	}
	start(t, cfg)

	readyz := func() (int, string) {
		resp, err := http.Get("http://" + probeAddr + "/readyz?verbose")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Once the webhook serves: the check alone holds it unready.
	fixtures.Poll(t, "/readyz names the failing check", func() bool {
		code, body := readyz()
		return code == http.StatusInternalServerError && strings.Contains(body, "[+]webhook ok") &&
			strings.Contains(body, "[-]certificate failed")
	})
	trusted.Store(true)
	fixtures.Poll(t, "/readyz passes", func() bool { code, _ := readyz(); return code == http.StatusOK })

	leaf, err := server.ServedCertificate()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(leaf.Raw, pair.Certificate[0]) {
		t.Error("ServedCertificate() is not the cert dir's tls.crt")
	}
}
