// Package server serves an admission handler over TLS, with health probes
// and metrics, from a controller-runtime manager. The binary, the envtest
// suites and the benchmarks' no-op webhook all build it with New.
//
// It bounds what any client can make it hold, a layer a room: the webhook
// port's connections and TLS handshakes (package conns, shared among client
// addresses by its one rule), bodies and requests being decided
// (limits.go), TLS (tls.go), the drain (drain.go), and the probe and
// metrics ports (probes.go).
package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server/conns"
)

// Config is the server's settings, one per flag of cmd/webhook, whose help says what each does.
type Config struct {
	CertDir, ClientCAName, ClientCNName string
	// Host and Port are where the webhook listens; an empty Host means every interface.
	Host                                       string
	Port                                       int
	MetricsBindAddress, HealthProbeBindAddress string
	EnableHTTP2                                bool
	ShutdownDrain                              time.Duration
}

// DefaultConfig returns the configuration the binary runs with when no flag is given.
func DefaultConfig() Config {
	return Config{
		Port:                   webhook.DefaultPort,
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
		ShutdownDrain:          DefaultShutdownDrain,
		ClientCNName:           DefaultClientCNName,
	}
}

// New builds the manager that serves hook at path. Start it to serve; when
// its context ends, the webhook fails its readiness check at once, serves for
// cfg.ShutdownDrain more, then stops accepting connections and finishes the
// requests in flight.
func New(cfg Config, path string, hook http.Handler) (manager.Manager, error) {
	if cfg.ClientCAName == "" && cfg.ClientCNName != "" && cfg.ClientCNName != DefaultClientCNName {
		return nil, fmt.Errorf("--client-cn-name=%s without --client-ca-name: no client certificate is asked for, so no name would be checked",
			cfg.ClientCNName)
	}
	webhookServer := &boundedServer{
		DefaultServer: &webhook.DefaultServer{Options: webhook.Options{
			Host: cfg.Host, Port: cfg.Port, CertDir: cfg.CertDir, ClientCAName: cfg.ClientCAName,
		}},
		config: cfg, limiter: newLimiter(), drainDone: time.After,
	}
	// The webhook reads nothing from the API server: no kubeconfig, no RBAC, no leader election. It serves
	// the probes and metrics itself (probeServer), with the bounds the manager's servers lack.
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
	// GetWebhookServer, not webhookServer: it is what adds the server to the manager's runnables.
	mgr.GetWebhookServer().Register(path, hook)
	// After Register, which gives the Options their defaults.
	if webhookServer.tls, webhookServer.certs, err = serverTLS(cfg, webhookServer.Options, ctrl.Log.WithName("webhook")); err != nil {
		return nil, err
	}

	if err := addProbes(mgr, cfg, webhookServer.StartedChecker()); err != nil {
		return nil, err
	}
	return mgr, nil
}

// boundedServer serves the webhook as controller-runtime's DefaultServer does, with the bounds and the
// drain it lacks. The embedded DefaultServer is never started: it registers and instruments the hooks on
// the mux served here, and holds the Options.
type boundedServer struct {
	*webhook.DefaultServer
	config Config
	// tls is what serverTLS built, and certs its certificate's watcher.
	tls     *tls.Config
	certs   *certwatcher.CertWatcher
	limiter *limiter
	// drainDone is time.After, or the tests' own.
	drainDone func(time.Duration) <-chan time.Time

	serving, draining atomic.Bool
}

// Register serves hook at path, within the limits.
func (s *boundedServer) Register(path string, hook http.Handler) {
	s.DefaultServer.Register(path, s.limiter.limit(hook))
}

// Start serves until ctx ends, then drains and shuts down.
func (s *boundedServer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("webhook")
	// The certificate is watched until the last request is answered, not only until the drain starts.
	watchCtx, stopWatching := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatching()
	if s.certs != nil {
		go func() {
			if err := s.certs.Start(watchCtx); err != nil {
				log.Error(err, "watching the serving certificate")
			}
		}()
	}

	address := net.JoinHostPort(s.Options.Host, strconv.Itoa(s.Options.Port))
	limits := conns.DefaultLimits()
	listener, err := conns.Listen(address, s.tls, limits)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", address, err)
	}
	srv := &http.Server{
		Handler:           s.closeWhileDraining(s.WebhookMux()),
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		// Requests keep their context through the drain: it ends with the server, not with ctx.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnState:   listener.ConnState,
		ErrorLog:    errorLog(log),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(listener) }()
	s.serving.Store(true)
	log.Info("serving", "address", address, "clientCAName", s.Options.ClientCAName, "shutdownDrain", s.config.ShutdownDrain,
		"connectionLimits", limits)

	select {
	case err := <-served:
		return fmt.Errorf("serving the webhook: %w", err)
	case <-ctx.Done():
	}
	return s.drain(ctx, log, srv, listener, served)
}
