package main

import (
	"flag"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
)

// bindDecisionFlags binds the flags that shape the decision. The server and
// preview share them, so a preview decides as the server would.
func bindDecisionFlags(fs *flag.FlagSet, o *mutate.Options) {
	fs.Func("flyte-task-selector", fmt.Sprintf("label selector of the MPIJobs that are Flyte tasks (default %q)",
		mutate.DefaultFlyteTaskSelector), func(s string) error {
		selector, err := labels.Parse(s)
		if err != nil {
			return err
		}
		if selector.Empty() {
			return fmt.Errorf("%q selects every MPIJob; name at least one label", s)
		}
		o.FlyteTaskSelector = selector
		return nil
	})
	fs.StringVar(&o.ContainerName, "container-name", o.ContainerName,
		"worker container to patch; the first container when none has this name")
	fs.Func("inject-as", fmt.Sprintf("where the worker command goes: one of %v (default %q)",
		mutate.InjectModes, o.InjectAs), func(s string) (err error) {
		o.InjectAs, err = mutate.ParseInjectMode(s)
		return err
	})
	fs.Func("fallback-worker-command", "worker command, as shell words, for Flyte MPIJobs whose annotations give none (default none: leave them)",
		func(s string) (err error) {
			o.FallbackCommand, err = mutate.SplitCommand(s)
			return err
		})
	fs.Func("on-invalid", fmt.Sprintf("what to do with a Flyte MPIJob whose annotations are invalid: %s rejects it, %s admits it unchanged with a warning (default %q)",
		mutate.InvalidDeny, mutate.InvalidWarn, o.OnInvalid), func(s string) (err error) {
		o.OnInvalid, err = mutate.ParseInvalidPolicy(strings.TrimSpace(s))
		return err
	})
}

// bindServerFlags binds the server's flags, kubebuilder's names where it has them.
func bindServerFlags(fs *flag.FlagSet, c *server.Config) {
	fs.StringVar(&c.CertDir, "cert-dir", c.CertDir,
		"directory holding tls.crt and tls.key, reloaded when they change (default: the system temp dir's k8s-webhook-server/serving-certs)")
	fs.IntVar(&c.Port, "port", c.Port, "port the webhook serves HTTPS on")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress,
		`address the Prometheus metrics are served on; "0" disables them`)
	fs.StringVar(&c.HealthProbeBindAddress, "health-probe-bind-address", c.HealthProbeBindAddress,
		`address /healthz and /readyz are served on; "0" disables them`)
	fs.BoolVar(&c.EnableHTTP2, "enable-http2", c.EnableHTTP2,
		"serve HTTP/2 too; off by default because of the HTTP/2 Rapid Reset attack (CVE-2023-44487)")
	bindDecisionFlags(fs, &c.Mutate)
}
