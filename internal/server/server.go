// Package server assembles the webhook's plumbing: a controller-runtime
// manager that serves an admission handler over TLS, health probes and
// metrics. The binary, the envtest suites and the benchmarks' no-op webhook
// all build it with New, so the tests run the same server a cluster does and
// the benchmark compares handlers on the same plumbing.
//
// The server bounds what any client can make it hold, a file a layer:
// connections (connections.go), ClientHellos and TLS handshakes (tls.go),
// bodies and requests in flight (limits.go), the probe and metrics ports
// and net/http's error log (probes.go). On the
// webhook port it shares connections, handshakes and requests among client
// addresses (fair.go, gate.go), so that a flood from one leaves the API server its
// share. On shutdown it turns unready, drains and finishes the requests in
// flight. Its TLS configuration is built from controller-runtime's
// webhook.Options as the library's own server builds it (tlsconfig.go), so
// that ClientCAName can require the API server's client certificate.
package server

import (
	"context"
	"crypto"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// DefaultShutdownDrain is how long the webhook keeps serving after SIGTERM by
// default: long enough for the API server and kube-proxy to stop sending to
// a terminating pod. With ShutdownTimeout and a margin for the process to
// exit it fits the Deployment's terminationGracePeriodSeconds (30), after
// which the kubelet kills the process.
const DefaultShutdownDrain = 15 * time.Second

// ShutdownTimeout bounds the wait, after the drain, for the requests in
// flight to finish: none takes longer than WriteTimeout, and the API server
// has given up on one long before.
const ShutdownTimeout = 10 * time.Second

// Config is the server's settings, one per flag of cmd/webhook.
type Config struct {
	// CertDir holds tls.crt and tls.key; they are reloaded when they change.
	CertDir string
	// ClientCAName, when set, names a file in CertDir of PEM CA certificates:
	// every client must then present a certificate they signed, as the API
	// server does through its admission kubeconfig (controller-runtime's
	// webhook.Options.ClientCAName). It is read once, by New.
	ClientCAName string
	// ClientCNName, with ClientCAName, is the common name the client
	// certificate must carry; empty accepts any that the CA signed.
	ClientCNName string
	// Host and Port are where the webhook listens; an empty Host means every interface.
	Host string
	Port int
	// MetricsBindAddress serves Prometheus metrics; "0" disables it.
	MetricsBindAddress string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	HealthProbeBindAddress string
	// EnableHTTP2 serves HTTP/2, which is off by default (CVE-2023-44487, Rapid Reset).
	EnableHTTP2 bool
	// ShutdownDrain is how long the webhook keeps serving, unready, once
	// asked to stop, before it stops accepting connections.
	ShutdownDrain time.Duration
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

// BindFlags binds the server's flags, kubebuilder's names.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CertDir, "cert-dir", c.CertDir,
		"directory holding tls.crt and tls.key, reloaded when they change (default: the system temp dir's k8s-webhook-server/serving-certs)")
	fs.StringVar(&c.ClientCAName, "client-ca-name", c.ClientCAName,
		"name of a file in --cert-dir holding the PEM certificates of the CA that signed the API server's client certificate "+
			"(its admission kubeconfig's); when set, a client without a certificate it signed is refused at the TLS handshake, "+
			"and the file is read once, at start (default none: every client is served)")
	fs.StringVar(&c.ClientCNName, "client-cn-name", c.ClientCNName,
		"with --client-ca-name, the common name the client certificate must carry; empty accepts any certificate the CA signed")
	fs.IntVar(&c.Port, "port", c.Port, "port the webhook serves HTTPS on")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress,
		`address the Prometheus metrics are served on; "0" disables them`)
	fs.StringVar(&c.HealthProbeBindAddress, "health-probe-bind-address", c.HealthProbeBindAddress,
		`address /healthz and /readyz are served on; "0" disables them`)
	fs.BoolVar(&c.EnableHTTP2, "enable-http2", c.EnableHTTP2,
		"serve HTTP/2 too; off by default because of the HTTP/2 Rapid Reset attack (CVE-2023-44487)")
	fs.DurationVar(&c.ShutdownDrain, "shutdown-drain", c.ShutdownDrain,
		"how long to keep serving, unready, after SIGTERM, while endpoints stop sending here; then requests in flight get "+
			ShutdownTimeout.String()+" to finish. Keep both below the pod's terminationGracePeriodSeconds")
}

// New builds the manager that serves hook at path. Start it to serve; when
// its context ends, the webhook fails its readiness check at once, serves for
// cfg.ShutdownDrain more, then stops accepting connections and finishes the
// requests in flight.
func New(cfg Config, path string, hook http.Handler) (manager.Manager, error) {
	if cfg.ClientCAName == "" && cfg.ClientCNName != "" && cfg.ClientCNName != DefaultClientCNName {
		return nil, fmt.Errorf("--client-cn-name=%s without --client-ca-name: no client certificate is asked for, so no name would be checked", cfg.ClientCNName)
	}
	tlsOpts := []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}
	if !cfg.EnableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	if cfg.ClientCAName != "" && cfg.ClientCNName != "" {
		tlsOpts = append(tlsOpts, requireCommonName(cfg.ClientCNName, ctrl.Log.WithName("webhook")))
	}
	webhookServer := &boundedServer{
		DefaultServer: &webhook.DefaultServer{Options: webhook.Options{
			Host: cfg.Host, Port: cfg.Port, CertDir: cfg.CertDir, ClientCAName: cfg.ClientCAName, TLSOpts: tlsOpts,
		}},
		config: cfg, limiter: newLimiter(), drainDone: time.After,
	}
	// The webhook reads nothing from the API server, so it runs without a
	// kubeconfig and without RBAC: the manager gets an empty client config,
	// which nothing ever uses, and no leader election. It serves the probes
	// and metrics itself, within the bounds of probeServer: the manager's
	// own servers read headers of up to 1 MiB for up to 32 s.
	mgr, err := ctrl.NewManager(&rest.Config{}, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhookServer,
		// The manager stops the webhook before the probes and metrics, and
		// gives up on it after this: time for the drain and the shutdown.
		GracefulShutdownTimeout: ptr.To(cfg.ShutdownDrain + ShutdownTimeout + 5*time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	// GetWebhookServer, not webhookServer: it is what adds the server to the manager's runnables.
	mgr.GetWebhookServer().Register(path, hook)
	// After Register, which gives the Options DefaultServer's defaults (the
	// cert dir, the file names, the port).
	if webhookServer.tls, webhookServer.certs, err = serverTLS(webhookServer.Options); err != nil {
		return nil, err
	}

	probes := http.NewServeMux()
	// Ready only once the webhook listens, so no request reaches a pod
	// that cannot answer it, and no longer once it drains.
	for name, checks := range map[string]map[string]healthz.Checker{
		"/healthz": {"ping": healthz.Ping},
		"/readyz":  {"webhook": webhookServer.StartedChecker()},
	} {
		handler := http.StripPrefix(name, &healthz.Handler{Checks: checks})
		probes.Handle(name, handler)
		probes.Handle(name+"/", handler)
	}
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	for name, serve := range map[string]struct {
		address string
		handler http.Handler
	}{"health probe": {cfg.HealthProbeBindAddress, probes}, "metrics": {cfg.MetricsBindAddress, metricsMux}} {
		if serve.address == "0" || serve.address == "" {
			continue
		}
		listener, err := listen(serve.address, MaxProbeConns)
		if err != nil {
			return nil, fmt.Errorf("listening for the %s server on %s: %w", name, serve.address, err)
		}
		log := ctrl.Log.WithName(name)
		if err := mgr.Add(&manager.Server{Name: name, Server: probeServer(serve.handler, log), Listener: listener}); err != nil {
			return nil, fmt.Errorf("adding the %s server: %w", name, err)
		}
	}
	return mgr, nil
}

// boundedServer serves the webhook as controller-runtime's DefaultServer
// does, with what DefaultServer does not let a caller set: its http.Server
// reads headers for up to 32 s and 1 MiB, bodies with no deadline at all,
// and it stops accepting connections the moment its context ends. The
// embedded DefaultServer is never started: it registers and instruments the
// hooks (the controller_runtime_webhook_* metrics) on the mux served here,
// and holds the Options the TLS configuration is built from (tlsconfig.go).
type boundedServer struct {
	*webhook.DefaultServer
	config Config
	// tls is what serverTLS built from the Options, and certs the watcher of
	// its certificate (nil when a TLS option gave one).
	tls     *tls.Config
	certs   *certwatcher.CertWatcher
	limiter *limiter
	// drainDone returns a channel that delivers once the drain is over:
	// time.After, or the tests' own.
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
	cfg := s.tls.Clone()
	cfg.GetCertificate = signingAtMost(runtime.GOMAXPROCS(0), cfg.GetCertificate)
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

	listener, err := listenTLS(s.address(), cfg)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.address(), err)
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
		ConnState:   listener.track,
		ErrorLog:    errorLog(log),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(listener) }()
	s.serving.Store(true)
	log.Info("serving", "address", s.address(), "clientCAName", s.Options.ClientCAName, "shutdownDrain", s.config.ShutdownDrain)

	select {
	case err := <-served:
		return fmt.Errorf("serving the webhook: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	log.Info("draining: unready, still serving", "for", s.config.ShutdownDrain)
	select {
	case err := <-served:
		return fmt.Errorf("serving the webhook: %w", err)
	case <-s.drainDone(s.config.ShutdownDrain):
	}
	log.Info("shutting down: no new connections, finishing the requests in flight", "within", ShutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	// net/http's Shutdown closes, unanswered, a connection whose first
	// request it reads after it began. So: every answer closes its
	// connection from now on, the listener closes, and the connections it
	// accepted send their request (or are closed at ReadHeaderTimeout) before
	// Shutdown waits for the answers in flight. Closing stops the TCP
	// listener only: Serve returns once the handshakes under way, whose
	// client may have sent its request already (TLS 1.3), have reached it.
	srv.SetKeepAlivesEnabled(false)
	if err := listener.Close(); err != nil {
		return fmt.Errorf("closing the webhook's listener: %w", err)
	}
	if err := <-served; !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("serving the webhook: %w", err)
	}
	listener.waitForUnanswered(shutdownCtx)
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down the webhook: %w", err)
	}
	return nil
}

// signingAtMost returns getCertificate with keys that sign at most n
// handshakes at once. A handshake's signature costs up to milliseconds of
// CPU (RSA 2048, cert-manager's default key; a tenth of that with the
// install's ECDSA P-256); when hundreds of clients connect
// at once, the goroutines signing would each take their turn on the CPU
// before a request on a connection already open. Waiting for the semaphore,
// they are not runnable, so requests on open connections, which is how the
// API server sends them, go first.
func signingAtMost(n int, getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	signing := make(chan struct{}, n)
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		cert, err := getCertificate(hello)
		if err != nil || cert == nil {
			return cert, err
		}
		signer, ok := cert.PrivateKey.(crypto.Signer)
		if !ok {
			return cert, nil
		}
		limited := *cert
		limited.PrivateKey = limitedSigner{Signer: signer, signing: signing}
		return &limited, nil
	}
}

// limitedSigner is a key that signs only while it holds a place in signing.
type limitedSigner struct {
	crypto.Signer
	signing chan struct{}
}

func (s limitedSigner) Sign(rand io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	s.signing <- struct{}{}
	defer func() { <-s.signing }()
	return s.Signer.Sign(rand, digest, opts)
}

// closeWhileDraining asks each client to close its connection after its
// answer once the drain has started, so the API server's next request
// opens a new connection through the Service, to a ready pod, rather than
// reusing one the shutdown is about to close.
func (s *boundedServer) closeWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// StartedChecker fails until the webhook listens for TLS, and from the start
// of the drain on. It does not dial the webhook: under a flood of
// connections, a dial waits in the listen backlog, and an unready pod would
// leave the API server no endpoint at all.
func (s *boundedServer) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		switch {
		case s.draining.Load():
			return errors.New("the webhook is shutting down")
		case !s.serving.Load():
			return errors.New("the webhook server has not started yet")
		}
		return nil
	}
}

// address is where the webhook listens: the Options' Host and Port, which
// Register defaulted.
func (s *boundedServer) address() string {
	return net.JoinHostPort(s.Options.Host, strconv.Itoa(s.Options.Port))
}
