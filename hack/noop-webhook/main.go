// Command noop-webhook is the reference the load benchmark (hack/load)
// compares bin/webhook against: the same controller-runtime manager and
// webhook server, with the same TLS settings, probes and metrics as
// internal/server.New, serving a handler that decodes the AdmissionReview
// and allows it unchanged (package noop). Only the handler differs. It
// imports nothing from internal/, so that its binary and its memory hold
// what any controller-runtime webhook holds, and none of ours.
//
//	noop-webhook --cert-dir DIR --port 9443 [--metrics-bind-address ADDR] [--health-probe-bind-address ADDR]
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/flyteorg/flyte-mpi-webhook/hack/noop-webhook/noop"
)

// path is internal/admission.Path, where the webhook is served.
const path = "/mutate-mpijob"

// config is the part of internal/server.Config that the server's plumbing reads.
type config struct {
	CertDir                string
	Port                   int
	MetricsBindAddress     string
	HealthProbeBindAddress string
	EnableHTTP2            bool
}

func main() {
	// internal/server.DefaultConfig's defaults.
	cfg := config{Port: webhook.DefaultPort, MetricsBindAddress: ":8080", HealthProbeBindAddress: ":8081"}
	fs := flag.NewFlagSet("noop-webhook", flag.ExitOnError)
	fs.StringVar(&cfg.CertDir, "cert-dir", cfg.CertDir, "directory holding tls.crt and tls.key")
	fs.IntVar(&cfg.Port, "port", cfg.Port, "port the webhook serves HTTPS on")
	fs.StringVar(&cfg.MetricsBindAddress, "metrics-bind-address", cfg.MetricsBindAddress, `metrics address; "0" disables them`)
	fs.StringVar(&cfg.HealthProbeBindAddress, "health-probe-bind-address", cfg.HealthProbeBindAddress, `probe address; "0" disables them`)
	fs.BoolVar(&cfg.EnableHTTP2, "enable-http2", cfg.EnableHTTP2, "serve HTTP/2 too")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: Parse exits on a bad flag

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	mgr, err := newManager(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	ctrl.Log.Info("starting the no-op webhook", "port", cfg.Port, "certDir", cfg.CertDir)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		ctrl.Log.Error(err, "no-op webhook stopped")
		os.Exit(1)
	}
}

// newManager is internal/server.New with the no-op handler: keep the two in
// step, or the comparison measures the difference in plumbing.
func newManager(cfg config) (manager.Manager, error) {
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !cfg.EnableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	webhookServer := webhook.NewServer(webhook.Options{
		Port:    cfg.Port,
		CertDir: cfg.CertDir,
		TLSOpts: tlsOpts,
	})
	mgr, err := ctrl.NewManager(&rest.Config{}, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: cfg.MetricsBindAddress, TLSOpts: tlsOpts},
		HealthProbeBindAddress: cfg.HealthProbeBindAddress,
		WebhookServer:          webhookServer,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	mgr.GetWebhookServer().Register(path, noop.Handler)
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, fmt.Errorf("adding the readiness check: %w", err)
	}
	return mgr, nil
}
