// Package server assembles the webhook's plumbing: a controller-runtime
// manager that serves an admission handler over TLS, health probes and
// metrics. The binary, the envtest suites and the benchmarks' no-op webhook
// all build it with New, so the tests run the same server a cluster does and
// the benchmark compares handlers on the same plumbing.
package server

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Config is the server's settings, one per flag of cmd/webhook.
type Config struct {
	// CertDir holds tls.crt and tls.key; they are reloaded when they change.
	CertDir string
	// Host and Port are where the webhook listens; an empty Host means every interface.
	Host string
	Port int
	// MetricsBindAddress serves Prometheus metrics; "0" disables it.
	MetricsBindAddress string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	HealthProbeBindAddress string
	// EnableHTTP2 serves HTTP/2, which is off by default (CVE-2023-44487, Rapid Reset).
	EnableHTTP2 bool
}

// DefaultConfig returns the configuration the binary runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		Port:                   webhook.DefaultPort,
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
	}
}

// BindFlags binds the server's flags, kubebuilder's names.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CertDir, "cert-dir", c.CertDir,
		"directory holding tls.crt and tls.key, reloaded when they change (default: the system temp dir's k8s-webhook-server/serving-certs)")
	fs.IntVar(&c.Port, "port", c.Port, "port the webhook serves HTTPS on")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress,
		`address the Prometheus metrics are served on; "0" disables them`)
	fs.StringVar(&c.HealthProbeBindAddress, "health-probe-bind-address", c.HealthProbeBindAddress,
		`address /healthz and /readyz are served on; "0" disables them`)
	fs.BoolVar(&c.EnableHTTP2, "enable-http2", c.EnableHTTP2,
		"serve HTTP/2 too; off by default because of the HTTP/2 Rapid Reset attack (CVE-2023-44487)")
}

// New builds the manager that serves hook at path. Start it to serve.
func New(cfg Config, path string, hook http.Handler) (manager.Manager, error) {
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !cfg.EnableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	webhookServer := webhook.NewServer(webhook.Options{
		Host:    cfg.Host,
		Port:    cfg.Port,
		CertDir: cfg.CertDir,
		TLSOpts: tlsOpts,
	})
	// The webhook reads nothing from the API server, so it runs without a
	// kubeconfig and without RBAC: the manager gets an empty client config,
	// which nothing ever uses, and no leader election.
	mgr, err := ctrl.NewManager(&rest.Config{}, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: cfg.MetricsBindAddress, TLSOpts: tlsOpts},
		HealthProbeBindAddress: cfg.HealthProbeBindAddress,
		WebhookServer:          webhookServer,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	// GetWebhookServer, not webhookServer: it is what adds the server to the manager's runnables.
	mgr.GetWebhookServer().Register(path, hook)
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the health check: %w", err)
	}
	// Ready only once the webhook serves TLS, so no request reaches a pod that cannot answer it.
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, fmt.Errorf("adding the readiness check: %w", err)
	}
	return mgr, nil
}
