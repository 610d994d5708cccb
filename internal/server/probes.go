package server

import (
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// probeServer serves a probe or metrics port, plain HTTP as the kubelet probes, bounded like the webhook port.
func probeServer(handler http.Handler, limits Limits, logger logr.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		MaxHeaderBytes:    limits.MaxProbeHeaderBytes,
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		ReadTimeout:       limits.ReadHeaderTimeout,
		WriteTimeout:      limits.ReadHeaderTimeout + 5*time.Second,
		IdleTimeout:       limits.IdleTimeout,
		ErrorLog:          errorLog(logger),
	}
}

// errorLog writes what an http.Server has to say (a failed accept, a panic) to logger.
func errorLog(logger logr.Logger) *log.Logger {
	return slog.NewLogLogger(logr.ToSlogHandler(logger), slog.LevelInfo)
}

// addProbes adds to mgr the servers of cfg's probe and metrics ports; /readyz asks ready, and cfg.ReadyCheck if set.
func addProbes(mgr manager.Manager, cfg Config, limits Limits, ready healthz.Checker) error {
	probes, metricsMux := http.NewServeMux(), http.NewServeMux()
	byPath := map[string]map[string]healthz.Checker{"/healthz": {"ping": healthz.Ping}, "/readyz": {"webhook": ready}}
	if cfg.ReadyCheck != nil {
		byPath["/readyz"]["certificate"] = cfg.ReadyCheck
	}
	for name, checks := range byPath {
		handler := http.StripPrefix(name, &healthz.Handler{Checks: checks})
		probes.Handle(name, handler)
		probes.Handle(name+"/", handler)
	}
	metricsMux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	for name, port := range map[string]struct {
		address string
		handler http.Handler
	}{"health probe": {cfg.HealthProbeBindAddress, probes}, "metrics": {cfg.MetricsBindAddress, metricsMux}} {
		if port.address == "0" || port.address == "" {
			continue
		}
		listener, err := net.Listen("tcp", port.address)
		if err != nil {
			return fmt.Errorf("listening for the %s server on %s: %w", name, port.address, err)
		}
		server := &manager.Server{Name: name, Server: probeServer(port.handler, limits, ctrl.Log.WithName(name)),
			Listener: netutil.LimitListener(listener, limits.MaxProbeConns)}
		if err := mgr.Add(server); err != nil {
			return fmt.Errorf("adding the %s server: %w", name, err)
		}
	}
	return nil
}
