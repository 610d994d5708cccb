package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// ServeLabelled starts one more webhook server, with opts, for the Flyte
// MPIJobs that carry the label key label (e.g. test.mpi.flyte.org/inject-as-args),
// so that a suite can run a server flag that Start does not, such as
// --inject-as=args. The webhook configurations installed before leave such
// jobs alone from then on. It returns once the API server sends them to the
// new server alone; ctx bounds that wait. The server runs until Stop.
func (e *Env) ServeLabelled(ctx context.Context, label string, opts mutate.Options) error {
	return e.ServeLabelledAs(ctx, label, e.Webhook, opts)
}

// ServeLabelledAs is ServeLabelled with a copy of another webhook
// configuration, such as the one config/default-with-policy renders, with
// its matchConditions.
func (e *Env) ServeLabelledAs(ctx context.Context, label string, hook *admissionregistrationv1.MutatingWebhookConfiguration,
	opts mutate.Options) error {
	return e.serveLabelled(ctx, label, hook, opts, nil)
}

// serveLabelled is ServeLabelledAs with a server whose configuration
// configure, when not nil, changes: its port (a free one when it leaves
// none), its cert dir, its client certificates.
func (e *Env) serveLabelled(ctx context.Context, label string, hook *admissionregistrationv1.MutatingWebhookConfiguration,
	opts mutate.Options, configure func(*server.Config)) error {
	_, name, ok := strings.Cut(label, "/")
	if !ok || name == "" {
		return fmt.Errorf("label %q: expected a prefixed key, such as test.mpi.flyte.org/%s", label, label)
	}

	// Leave the labelled jobs to the new server, so that it is the only one
	// that ever mutates them.
	if err := e.LeaveLabelled(ctx, label); err != nil {
		return err
	}

	serving, cancel := context.WithCancel(context.Background())
	stopOthers := e.cancel
	e.cancel = func() { cancel(); stopOthers() }
	wio := &e.testEnv.WebhookInstallOptions
	cfg := server.Config{Host: wio.LocalServingHost, CertDir: wio.LocalServingCertDir, MetricsBindAddress: "0", HealthProbeBindAddress: "0"}
	if configure != nil {
		configure(&cfg)
	}
	if cfg.Port == 0 {
		var err error
		if cfg.Port, err = FreePort(cfg.Host); err != nil {
			return err
		}
	}
	done, err := e.serve(ctx, serving, cfg, opts)
	if err != nil {
		return err
	}
	if e.labelled == nil {
		e.labelled = map[string]labelledServer{}
	}
	e.labelled[label] = labelledServer{stop: cancel, done: done, configuration: hook.Name + "-" + name}
	url := "https://" + net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)) + admission.Path
	if err := e.InstallCopyOf(ctx, hook, name, url, func(w *admissionregistrationv1.MutatingWebhook) {
		requireLabel(w, label, metav1.LabelSelectorOpExists)
	}); err != nil {
		return err
	}
	return e.waitForLabelled(ctx, label, true)
}

// LeaveLabelled makes every installed webhook configuration skip the Flyte
// MPIJobs that carry the label key label, and returns once none of them
// answers for such a job; ctx bounds that wait.
func (e *Env) LeaveLabelled(ctx context.Context, label string) error {
	var installed admissionregistrationv1.MutatingWebhookConfigurationList
	if err := e.Client.List(ctx, &installed); err != nil {
		return err
	}
	for i := range installed.Items {
		hook := &installed.Items[i]
		for j := range hook.Webhooks {
			requireLabel(&hook.Webhooks[j], label, metav1.LabelSelectorOpDoesNotExist)
		}
		if err := e.Client.Update(ctx, hook); err != nil {
			return fmt.Errorf("leaving jobs labelled %s to a new server: %w", label, err)
		}
		if hook.Name == e.Webhook.Name {
			e.Webhook = hook.DeepCopy() // as installed, as its doc says
		}
	}
	return e.waitForLabelled(ctx, label, false)
}

// InstallCopy installs a copy of the webhook configuration, named after it
// with -name, whose webhooks call url with the serving certificate's CA
// (ServingCertDir), after route has changed each, such as its selectors.
func (e *Env) InstallCopy(ctx context.Context, name, url string, route func(*admissionregistrationv1.MutatingWebhook)) error {
	return e.InstallCopyOf(ctx, e.Webhook, name, url, route)
}

// InstallCopyOf is InstallCopy of another webhook configuration, such as
// one that another install of config/ renders.
func (e *Env) InstallCopyOf(ctx context.Context, of *admissionregistrationv1.MutatingWebhookConfiguration, name, url string,
	route func(*admissionregistrationv1.MutatingWebhook)) error {
	hook := of.DeepCopy()
	hook.ObjectMeta = metav1.ObjectMeta{Name: of.Name + "-" + name}
	for i := range hook.Webhooks {
		w := &hook.Webhooks[i]
		w.Name = name + "." + w.Name
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: e.testEnv.WebhookInstallOptions.LocalServingCAData}
		route(w)
	}
	return e.Client.Create(ctx, hook)
}

// ServingCertDir holds the serving certificate (tls.crt, tls.key) that the
// webhook configurations' CA signed, for a server of a test's own.
func (e *Env) ServingCertDir() string { return e.testEnv.WebhookInstallOptions.LocalServingCertDir }

// labelledServer is a server ServeLabelled started.
type labelledServer struct {
	stop          context.CancelFunc
	done          <-chan struct{}
	configuration string // the MutatingWebhookConfiguration that sends it the labelled jobs
}

// StopLabelled stops the server ServeLabelled started for label, and returns
// once it no longer serves. Its webhook configuration stays, as a cluster's
// does while its webhook is down; LabelledConfiguration names it.
func (e *Env) StopLabelled(label string) error {
	s, ok := e.labelled[label]
	if !ok {
		return fmt.Errorf("no server for jobs labelled %s", label)
	}
	s.stop()
	<-s.done
	return nil
}

// LabelledConfiguration names the webhook configuration that sends the jobs
// labelled label to the server ServeLabelled started for them.
func (e *Env) LabelledConfiguration(label string) string { return e.labelled[label].configuration }

// waitForLabelled returns once a dry-run of a Flyte job labelled label (no
// label when empty) is mutated, or is not, as wanted: the API server picks up
// a webhook configuration a little after storing it.
func (e *Env) waitForLabelled(ctx context.Context, label string, mutated bool) error {
	var got bool
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, ServeTimeout, true, func(ctx context.Context) (bool, error) {
		b := e.Job("default", fixtures.HorovodNoWorkerCommand).Annotation(mutate.AnnotationTaskCustom, fixtures.FlytekitCustom)
		if label != "" {
			b.Label(label, "true")
		}
		job := b.Obj()
		lastErr = e.Client.Create(ctx, job, client.DryRunAll)
		_, got = job.GetAnnotations()[mutate.AnnotationWorkerCommandSource]
		return lastErr == nil && got == mutated, nil
	})
	if err != nil {
		return fmt.Errorf("jobs labelled %q: waiting for mutated=%t, got %t: %w", label, mutated, got, errors.Join(err, lastErr))
	}
	return nil
}

// requireLabel sets the requirement on key in a webhook's object selector.
func requireLabel(w *admissionregistrationv1.MutatingWebhook, key string, op metav1.LabelSelectorOperator) {
	if w.ObjectSelector == nil {
		w.ObjectSelector = &metav1.LabelSelector{}
	}
	w.ObjectSelector.MatchExpressions = slices.DeleteFunc(w.ObjectSelector.MatchExpressions,
		func(r metav1.LabelSelectorRequirement) bool { return r.Key == key })
	w.ObjectSelector.MatchExpressions = append(w.ObjectSelector.MatchExpressions,
		metav1.LabelSelectorRequirement{Key: key, Operator: op})
}
