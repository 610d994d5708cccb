// Command webhook serves the Flyte MPIJob worker-command webhook.
//
//	webhook [flags]                 serve the mutating admission webhook
//	webhook preview -f FILE [flags] print an MPIJob as the webhook would store it
//	webhook annotate -f FILE        print the annotations for a task
//
// Run any of them with -h for its flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
)

// subcommands are the offline tools beside the server.
var subcommands = map[string]func(args []string, stdin io.Reader, stdout, stderr io.Writer) error{
	"preview":  runPreview,
	"annotate": runAnnotate,
}

func main() {
	if len(os.Args) > 1 {
		if run, ok := subcommands[os.Args[1]]; ok {
			if err := run(os.Args[2:], os.Stdin, os.Stdout, os.Stderr); err != nil {
				if !errors.Is(err, errDenied) && !errors.Is(err, flag.ErrHelp) {
					fmt.Fprintln(os.Stderr, "error:", err)
				}
				os.Exit(1)
			}
			return
		}
	}

	cfg := server.DefaultConfig()
	fs := flag.NewFlagSet("webhook", flag.ExitOnError)
	bindServerFlags(fs, &cfg)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: Parse exits on a bad flag

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if err := serve(cfg); err != nil {
		ctrl.Log.Error(err, "webhook stopped")
		os.Exit(1)
	}
}

func serve(cfg server.Config) error {
	mgr, err := server.New(cfg)
	if err != nil {
		return err
	}
	ctrl.Log.Info("starting", "port", cfg.Port, "certDir", cfg.CertDir,
		"flyteTaskSelector", cfg.Mutate.FlyteTaskSelector.String(), "containerName", cfg.Mutate.ContainerName,
		"injectAs", cfg.Mutate.InjectAs, "fallbackWorkerCommand", cfg.Mutate.FallbackCommand, "onInvalid", cfg.Mutate.OnInvalid)
	return mgr.Start(ctrl.SetupSignalHandler())
}
