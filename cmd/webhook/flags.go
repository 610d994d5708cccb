package main

import (
	"flag"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/flyteorg/flyte-mpi-webhook/internal/certs"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
)

// bindServerFlags binds the flags of the server's Config, kubebuilder's names.
func bindServerFlags(fs *flag.FlagSet, c *server.Config) {
	fs.StringVar(&c.CertDir, "cert-dir", c.CertDir,
		"directory holding tls.crt and tls.key, reloaded when they change")
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
			server.ShutdownTimeout.String()+" to finish. Keep both below the pod's terminationGracePeriodSeconds")
}

// bindCertFlags binds the flags of the webhook's own certificates, certs.Config.
func bindCertFlags(fs *flag.FlagSet, c *certs.Config) {
	fs.StringVar(&c.Secret, "cert-secret", c.Secret,
		"namespace/name of a Secret, which must exist, in which the webhook keeps a CA and its serving certificate itself: "+
			"it writes the certificate into --cert-dir and the CA into the caBundle of --cert-webhook-configuration, renewing "+
			"each before it expires; it needs get, list, watch and update of both, by name (default none: serve --cert-dir's "+
			"files, which someone else writes)")
	fs.StringVar(&c.Configuration, "cert-webhook-configuration", c.Configuration,
		"with --cert-secret, the name of the MutatingWebhookConfiguration whose caBundle the webhook writes")
	fs.Func("cert-dns-names", "with --cert-secret, the comma-separated DNS names of the serving certificate, the Service's "+
		"(<service>.<namespace>.svc); the readiness check verifies it for the first (default none)", func(s string) error {
		c.DNSNames = nil
		for name := range strings.SplitSeq(s, ",") {
			if name = strings.TrimSpace(name); name != "" {
				c.DNSNames = append(c.DNSNames, name)
			}
		}
		return nil
	})
	fs.DurationVar(&c.CAValidity, "cert-ca-validity", c.CAValidity,
		"with --cert-secret, how long a CA is valid; it is replaced once two thirds of that have passed, "+
			"the serving certificate moving to the new CA only once the caBundle holds it")
	fs.DurationVar(&c.Validity, "cert-validity", c.Validity,
		"with --cert-secret, how long a serving certificate is valid (at most until its CA expires); it is renewed once "+
			"two thirds of that have passed (at least "+certs.MinValidity.String()+")")
}

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
		"only warns: when a worker container of this name is not the first, the answer warns that the MPI container "+
			"must come first; it never chooses the container: the command goes to the first, where both MPI operators run MPI")
	fs.Func("inject-as", fmt.Sprintf("where the worker command goes: one of %v (default %q)",
		mutate.InjectModes, o.InjectAs), func(s string) (err error) {
		o.InjectAs, err = mutate.ParseInjectMode(s)
		return err
	})
	fs.BoolVar(&o.InferWorkerCommand, "infer-worker-command", o.InferWorkerCommand,
		"take the worker command a task declared, which Flyte writes into the worker's args (where the training-operator "+
			"runs sleep 365d instead), when no annotation gives one")
	fs.Func("fallback-worker-command", "worker command, as shell words, for Flyte MPIJobs whose worker has no command "+
		"and whose annotations and task declare none (default none: leave them as Flyte made them; on the "+
		"training-operator they run as they are, the launcher starting the ranks in the workers with kubectl exec)",
		func(s string) (err error) {
			o.FallbackCommand, err = mutate.SplitCommand(s)
			return err
		})
	fs.Func("on-invalid", fmt.Sprintf("what to do with a Flyte MPIJob whose annotations are invalid: %s rejects it, %s admits it unchanged with a warning (default %q)",
		mutate.InvalidDeny, mutate.InvalidWarn, o.OnInvalid), func(s string) (err error) {
		o.OnInvalid, err = mutate.ParseInvalidAction(strings.TrimSpace(s))
		return err
	})
}
