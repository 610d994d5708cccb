// Command noop-webhook is the reference `make bench` loads beside bin/webhook:
// the same server, built by internal/server.New with the same defaults, TLS
// settings, probes and metrics, serving refhook's no-op; it takes the flags
// make bench gives both. Only the handler differs, and its binary links
// nothing of ours that decides.
package main

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/bench/refhook"
)

func main() {
	cfg := server.DefaultConfig()
	cfg.ShutdownDrain = 0 // a benchmark's reference stops at once
	flag.StringVar(&cfg.CertDir, "cert-dir", cfg.CertDir, "directory holding tls.crt and tls.key")
	flag.IntVar(&cfg.Port, "port", cfg.Port, "port the webhook serves HTTPS on")
	flag.StringVar(&cfg.MetricsBindAddress, "metrics-bind-address", cfg.MetricsBindAddress, "address of the metrics")
	flag.StringVar(&cfg.HealthProbeBindAddress, "health-probe-bind-address", cfg.HealthProbeBindAddress, "address of the probes")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	// internal/admission.Path, which this binary does not link.
	mgr, err := server.New(cfg, server.DefaultLimits(), "/mutate-mpijob", refhook.Handler(nil))
	if err == nil {
		err = mgr.Start(ctrl.SetupSignalHandler())
	}
	if err != nil {
		ctrl.Log.Error(err, "no-op webhook")
		os.Exit(1)
	}
}
