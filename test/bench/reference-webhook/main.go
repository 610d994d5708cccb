// Command reference-webhook is a reference `make bench` measures bin/webhook
// against, in a process of its own as the webhook runs in its Pod:
// refhook's handler, allowing every review with no patch (the no-op) or
// with --patch's, served by internal/server.New with the webhook's
// defaults, TLS settings, probes and metrics, or, with --plain, by net/http
// alone over TLS, as a new user would write one. It takes the flags make
// bench gives bin/webhook. Only the handler differs, and its binary links
// nothing of ours that decides.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/bench/refhook"
)

// path is internal/admission.Path, which this binary does not link.
const path = "/mutate-mpijob"

func main() {
	cfg := server.DefaultConfig()
	cfg.ShutdownDrain = 0 // a benchmark's reference stops at once
	flag.StringVar(&cfg.CertDir, "cert-dir", cfg.CertDir, "directory holding tls.crt and tls.key")
	flag.IntVar(&cfg.Port, "port", cfg.Port, "port the webhook serves HTTPS on")
	flag.StringVar(&cfg.MetricsBindAddress, "metrics-bind-address", cfg.MetricsBindAddress, "address of the metrics")
	flag.StringVar(&cfg.HealthProbeBindAddress, "health-probe-bind-address", cfg.HealthProbeBindAddress, "address of the probes")
	patchFile := flag.String("patch", "", "file holding the JSON patch to answer every review with (default none: the no-op)")
	plain := flag.Bool("plain", false, "serve with net/http alone over TLS, without internal/server, its probes and metrics")
	callsAddress := flag.String("calls-address", "", "address to serve, in plain HTTP, GET /calls: how many reviews it was sent")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	if err := run(cfg, *patchFile, *plain, *callsAddress); err != nil {
		ctrl.Log.Error(err, "reference webhook")
		os.Exit(1)
	}
}

func run(cfg server.Config, patchFile string, plain bool, callsAddress string) error {
	var patch []byte
	if patchFile != "" {
		var err error
		if patch, err = os.ReadFile(patchFile); err != nil {
			return err
		}
	}
	var calls atomic.Int64
	reference := refhook.Handler(patch)
	hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1); reference.ServeHTTP(w, r) })
	ctx := ctrl.SetupSignalHandler()
	if callsAddress != "" {
		listener, err := net.Listen("tcp", callsAddress)
		if err != nil {
			return err
		}
		count := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprint(w, calls.Load())
		})}
		context.AfterFunc(ctx, func() { _ = count.Close() })
		go func() { _ = count.Serve(listener) }()
	}
	if !plain {
		mgr, err := server.New(cfg, server.DefaultLimits(), path, hook)
		if err != nil {
			return err
		}
		return mgr.Start(ctx)
	}
	srv := &http.Server{Addr: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)), Handler: hook, ReadHeaderTimeout: 5 * time.Second}
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	err := srv.ListenAndServeTLS(filepath.Join(cfg.CertDir, "tls.crt"), filepath.Join(cfg.CertDir, "tls.key"))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
