// Command noop-webhook is the reference the load benchmark (hack/load)
// compares bin/webhook against: the same server, built by internal/server.New
// with the same flags, TLS settings, probes and metrics, serving a handler
// that decodes the AdmissionReview and allows it unchanged (package noop).
// Only the handler differs. It imports nothing that decides (internal/mutate,
// internal/admission, flyteidl), so that its binary and its memory hold what
// any controller-runtime webhook holds, and none of ours.
//
//	noop-webhook --cert-dir DIR --port 9443 [--metrics-bind-address ADDR] [--health-probe-bind-address ADDR]
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flyteorg/flyte-mpi-webhook/hack/noop-webhook/noop"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
)

// path is internal/admission.Path, where the webhook is served.
const path = "/mutate-mpijob"

func main() {
	cfg := server.DefaultConfig()
	fs := flag.NewFlagSet("noop-webhook", flag.ExitOnError)
	cfg.BindFlags(fs)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: Parse exits on a bad flag

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	mgr, err := server.New(cfg, path, noop.Handler)
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
