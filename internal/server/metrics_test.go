package server_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// TestWebhookMetrics holds what /metrics says of the webhook port's
// requests to controller-runtime's own webhook server's metrics: the
// names, help, type and labels of each family, and the latency's buckets,
// for a hook of a path of its own, after one request answered 200.
func TestWebhookMetrics(t *testing.T) {
	const path = "/metrics-of-a-hook"
	certDir := t.TempDir()
	ca, err := fixtures.WriteServingCert(certDir)
	if err != nil {
		t.Fatal(err)
	}
	_, port := freeAddress(t)
	metricsAddr, _ := freeAddress(t)
	cfg := server.DefaultConfig()
	cfg.Host, cfg.Port, cfg.CertDir, cfg.ShutdownDrain = "127.0.0.1", port, certDir, 0
	cfg.MetricsBindAddress, cfg.HealthProbeBindAddress = metricsAddr, "0"
	mgr, err := server.New(cfg, server.DefaultLimits(), path, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	if err != nil {
		t.Fatal(err)
	}
	fixtures.Run(t, mgr)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + path
	fixtures.Poll(t, "the hook answers", func() bool {
		resp, err := client.Post(url, "application/json", strings.NewReader("{}"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	scraped, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var got []string // the families' HELP and TYPE, and the hook's series without their values
	for line := range strings.SplitSeq(string(scraped), "\n") {
		switch {
		case strings.HasPrefix(line, "# HELP controller_runtime_webhook_"), strings.HasPrefix(line, "# TYPE controller_runtime_webhook_"):
			got = append(got, line)
		case strings.HasPrefix(line, "controller_runtime_webhook_") && strings.Contains(line, `webhook="`+path+`"`):
			got = append(got, line[:strings.LastIndexByte(line, ' ')])
		}
	}
	want := []string{
		"# HELP controller_runtime_webhook_latency_seconds Histogram of the latency of processing admission requests",
		"# TYPE controller_runtime_webhook_latency_seconds histogram",
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="1e-08"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="1e-07"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="1e-06"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="9.999999999999999e-06"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="9.999999999999999e-05"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="0.001"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="0.01"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="0.1"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="1"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="10"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="100"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="1000"}`,
		`controller_runtime_webhook_latency_seconds_bucket{webhook="/metrics-of-a-hook",le="+Inf"}`,
		`controller_runtime_webhook_latency_seconds_sum{webhook="/metrics-of-a-hook"}`,
		`controller_runtime_webhook_latency_seconds_count{webhook="/metrics-of-a-hook"}`,
		"# HELP controller_runtime_webhook_panics_total Total number of webhook panics",
		"# TYPE controller_runtime_webhook_panics_total counter",
		"# HELP controller_runtime_webhook_requests_in_flight Current number of admission requests being served.",
		"# TYPE controller_runtime_webhook_requests_in_flight gauge",
		`controller_runtime_webhook_requests_in_flight{webhook="/metrics-of-a-hook"}`,
		"# HELP controller_runtime_webhook_requests_total Total number of admission requests by HTTP status code.",
		"# TYPE controller_runtime_webhook_requests_total counter",
		`controller_runtime_webhook_requests_total{code="200",webhook="/metrics-of-a-hook"}`,
		`controller_runtime_webhook_requests_total{code="500",webhook="/metrics-of-a-hook"}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("/metrics of the webhook's requests (-want +got):\n%s", diff)
	}
}
