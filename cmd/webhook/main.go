// Command webhook serves the Flyte MPIJob worker-command webhook.
//
//	webhook [flags]   serve the mutating admission webhook (see -help)
package main

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
)

func main() {
	cfg := server.DefaultConfig()
	fs := flag.NewFlagSet("webhook", flag.ExitOnError)
	bindServerFlags(fs, &cfg)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: Parse exits on a bad flag

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := run(cfg); err != nil {
		ctrl.Log.Error(err, "webhook stopped")
		os.Exit(1)
	}
}

func run(cfg server.Config) error {
	mgr, err := server.New(cfg)
	if err != nil {
		return err
	}
	ctrl.Log.Info("starting", "port", cfg.Port, "certDir", cfg.CertDir,
		"flyteTaskSelector", cfg.Mutate.FlyteTaskSelector.String(), "containerName", cfg.Mutate.ContainerName,
		"injectAs", cfg.Mutate.InjectAs, "fallbackWorkerCommand", cfg.Mutate.FallbackCommand, "onInvalid", cfg.Mutate.OnInvalid)
	return mgr.Start(ctrl.SetupSignalHandler())
}
