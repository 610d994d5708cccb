// Command webhook serves the Flyte MPIJob worker-command webhook.
//
//	webhook [flags]                 serve the mutating admission webhook
//	webhook preview -f FILE [flags] print an MPIJob as the webhook would store it
//	webhook annotate -f FILE        print the annotations for a task
//	webhook version [-o json]       print the version, the commit and the Go version
//	webhook check -n NAMESPACE      dry-run Flyte MPIJobs through the API server, and fail
//	                                unless it stores the worker command (the chart's helm test)
//	webhook unregister --name NAME  delete the webhook's configuration, before the webhook goes
//	                                (the chart's pre-delete hook)
//
// Run any of them with -h for its flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/certs"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/internal/truncate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/version"
)

// subcommands are the tools beside the server: preview, annotate and
// version offline; check and unregister, the chart's hooks, against the API
// server.
var subcommands = map[string]func(args []string, stdin io.Reader, stdout, stderr io.Writer) error{
	"preview":    runPreview,
	"annotate":   runAnnotate,
	"version":    runVersion,
	"check":      runCheck,
	"unregister": runUnregister,
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

	cfg, certCfg, opts := server.DefaultConfig(), certs.DefaultConfig(), mutate.DefaultOptions()
	fs := flag.NewFlagSet("webhook", flag.ExitOnError)
	bindServerFlags(fs, &cfg)
	bindCertFlags(fs, &certCfg)
	bindDecisionFlags(fs, &opts)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	_ = fs.Parse(os.Args[1:]) // ExitOnError: Parse exits on a bad flag

	ctrl.SetLogger(truncate.Logger(zap.New(zap.UseFlagOptions(&zapOpts))))
	if err := serve(cfg, certCfg, opts); err != nil {
		ctrl.Log.Error(err, "webhook stopped")
		os.Exit(1)
	}
}

func serve(cfg server.Config, certCfg certs.Config, opts mutate.Options) error {
	// The Go runtime's soft memory limit, from the container's (see config/manager).
	memoryLimit, err := setMemoryLimit(os.Getenv(memoryLimitEnv))
	if err != nil {
		return err
	}
	// The first SIGTERM or SIGINT starts the drain; a second exits at once.
	ctx := ctrl.SetupSignalHandler()
	rotator, err := ownCertificates(ctx, &cfg, certCfg)
	if err != nil {
		return err
	}
	// The walk of a review, from the server to the decision and back, is
	// internal/admission's package doc.
	limits := defaultLimits()
	mgr, err := server.New(cfg, limits.server, admission.Path, admission.NewHandler(opts, limits.review, nil))
	if err != nil {
		return err
	}
	if rotator != nil {
		if err := rotator.AddTo(mgr); err != nil {
			return err
		}
	}
	build := version.Get()
	ctrl.Log.Info("starting", "version", build.Version, "revision", build.Revision, "goVersion", build.GoVersion, "port", cfg.Port, "certDir", cfg.CertDir,
		"clientCAName", cfg.ClientCAName, "clientCNName", cfg.ClientCNName,
		"flyteTaskSelector", opts.FlyteTaskSelector.String(), "containerName", opts.ContainerName,
		"injectAs", opts.InjectAs, "fallbackWorkerCommand", opts.FallbackCommand, "onInvalid", opts.OnInvalid,
		"shutdownDrain", cfg.ShutdownDrain, "goMemoryLimit", memoryLimit, "certSecret", certCfg.Secret, "limits", limits)
	return mgr.Start(ctx)
}

// ownCertificates, with --cert-secret, makes or reads the serving
// certificate, writes it into --cert-dir before the server loads it, and
// adds to /readyz the check that the caBundle trusts it; it returns the
// Rotator that keeps both up to date, or nil without --cert-secret.
func ownCertificates(ctx context.Context, cfg *server.Config, certCfg certs.Config) (*certs.Rotator, error) {
	if !certCfg.Enabled() {
		return nil, nil
	}
	if err := certCfg.Validate(); err != nil {
		return nil, err
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("--cert-secret reads and writes the Secret through the API server: %w", err)
	}
	rotator, err := certs.New(restConfig, certCfg, cfg.CertDir, ctrl.Log.WithName("certificates"))
	if err != nil {
		return nil, err
	}
	if err := rotator.Bootstrap(ctx); err != nil {
		return nil, err
	}
	cfg.ReadyCheck = rotator.ReadyCheck(server.ServedCertificate)
	return rotator, nil
}

// readInput reads a subcommand's -f: a file, or standard input for -, each
// up to the webhook's MaxBodyBytes, the most a review may carry.
func readInput(file string, stdin io.Reader) ([]byte, error) {
	switch file {
	case "":
		return nil, errors.New("-f is required (- reads standard input)")
	case "-":
		return readBounded(stdin)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f)
}

func readBounded(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, defaultLimits().review.MaxBodyBytes))
}

// subcommandFlags is a subcommand's flag set: its errors, and usage followed
// by the flags, on stderr.
func subcommandFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}
