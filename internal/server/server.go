// Package server serves an http.Handler over TLS from a controller-runtime manager, as its webhook.Server, within
// its Limits, with health probes and metrics. It knows no handler's package: bodies and reviews are internal/admission's.
package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server/conns"
)

// Config is the server's settings; cmd/webhook binds a flag to each but Host, the field's
// name in kebab case (kubebuilder's: --cert-dir). DefaultConfig gives the defaults.
type Config struct {
	// CertDir holds the serving certificate, tls.crt and tls.key, reloaded when they change. Defaults to
	// controller-runtime's, k8s-webhook-server/serving-certs in the temporary directory.
	CertDir string
	// ClientCAName names a file in CertDir with the PEM certificates of the CA that signed the API server's
	// client certificate, read once by New; a client without a certificate it signed is then refused at the
	// TLS handshake. Defaults to none: every client is served.
	ClientCAName string
	// ClientCNName is the common name the client certificate must carry, with ClientCAName; empty accepts
	// any the CA signed. Defaults to DefaultClientCNName, kube-apiserver.
	ClientCNName string
	// Host is the address the webhook port listens on, set by the tests only. Defaults to every interface.
	Host string
	// Port is the port the webhook serves HTTPS on. Defaults to controller-runtime's webhook.DefaultPort, 9443.
	Port int
	// MetricsBindAddress is the address the metrics are served on; "0" disables them. Defaults to ":8080".
	MetricsBindAddress string
	// HealthProbeBindAddress is the address /healthz and /readyz are served on; "0" disables them. Defaults to ":8081".
	HealthProbeBindAddress string
	// EnableHTTP2 serves HTTP/2 too. Defaults to false: the HTTP/2 Rapid Reset attack (CVE-2023-44487).
	EnableHTTP2 bool
	// ShutdownDrain is how long the webhook serves on, unready, after SIGTERM, before the requests in flight
	// get ShutdownTimeout to finish. Defaults to DefaultShutdownDrain, 15s.
	ShutdownDrain time.Duration
	// ReadyCheck, no flag's, is one more check of /readyz: cmd/webhook's with --cert-secret, that the caBundle trusts
	// the certificate served (ServedCertificate). Defaults to none: /readyz checks only that the webhook serves.
	ReadyCheck healthz.Checker
}

// DefaultConfig returns the settings the webhook runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		CertDir:                filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs"), // controller-runtime's
		Port:                   webhook.DefaultPort,
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
		ShutdownDrain:          DefaultShutdownDrain,
		ClientCNName:           DefaultClientCNName,
	}
}

// New builds the manager that serves hook at path within limits, and drains when its context ends (drain).
func New(cfg Config, limits Limits, path string, hook http.Handler) (manager.Manager, error) {
	if cfg.ClientCAName == "" && cfg.ClientCNName != "" && cfg.ClientCNName != DefaultClientCNName {
		return nil, fmt.Errorf("--client-cn-name=%s without --client-ca-name: no client certificate is asked for, so no name would be checked",
			cfg.ClientCNName)
	}
	tlsConfig, certs, err := serverTLS(cfg, ctrl.Log.WithName("webhook"))
	if err != nil {
		return nil, err
	}
	servingCertificates.Store(certs)
	webhookServer := &webhookServer{config: cfg, limits: limits, tls: tlsConfig, certs: certs, drainDone: time.After,
		Server: webhook.NewServer(webhook.Options{WebhookMux: http.NewServeMux()})}
	// The webhook reads nothing from the API server: no kubeconfig, no RBAC, no leader election. It serves
	// the probes and metrics itself, with the bounds the manager's servers lack.
	mgr, err := ctrl.NewManager(&rest.Config{}, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhookServer,
		// The manager stops the webhook before the probes and metrics.
		GracefulShutdownTimeout: ptr.To(cfg.ShutdownDrain + ShutdownTimeout + 5*time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	mgr.GetWebhookServer().Register(path, hook)
	if err := addProbes(mgr, cfg, limits, webhookServer.StartedChecker()); err != nil {
		return nil, err
	}
	return mgr, nil
}

// webhookServer is the manager's webhook.Server: controller-runtime's, never started, for Register (a
// hook counted in controller_runtime_webhook_* as by the manager's default server) and the WebhookMux
// that Start serves; Start, StartedChecker and NeedLeaderElection are its own.
type webhookServer struct {
	webhook.Server
	config    Config
	limits    Limits
	tls       *tls.Config
	certs     *certwatcher.CertWatcher
	drainDone func(time.Duration) <-chan time.Time // time.After, or the tests' own

	serving, draining atomic.Bool
}

func (s *webhookServer) NeedLeaderElection() bool { return false }

func (s *webhookServer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("webhook")
	// The certificate is watched until the last request is answered, not only until the drain starts.
	watchCtx, stopWatching := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatching()
	go func() {
		if err := s.certs.Start(watchCtx); err != nil {
			log.Error(err, "watching the serving certificate")
		}
	}()

	address := net.JoinHostPort(s.config.Host, strconv.Itoa(s.config.Port))
	listener, err := conns.Listen(address, s.tls, s.limits.Limits)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", address, err)
	}
	srv := &http.Server{
		Handler:           s.closeWhileDraining(s.WebhookMux()),
		MaxHeaderBytes:    s.limits.MaxHeaderBytes,
		ReadHeaderTimeout: s.limits.ReadHeaderTimeout,
		ReadTimeout:       s.limits.ReadTimeout,
		WriteTimeout:      s.limits.WriteTimeout,
		IdleTimeout:       s.limits.IdleTimeout,
		// Requests keep their context through the drain: it ends with the server, not with ctx.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnState:   listener.ConnState,
		ErrorLog:    errorLog(log),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(listener) }()
	s.serving.Store(true)
	log.Info("serving", "address", address, "clientCAName", s.config.ClientCAName, "shutdownDrain", s.config.ShutdownDrain)

	select {
	case err := <-served:
		return fmt.Errorf("serving the webhook: %w", err)
	case <-ctx.Done():
	}
	return s.drain(ctx, log, srv, listener, served)
}
