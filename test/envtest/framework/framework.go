// Package framework runs the webhook against a real kube-apiserver and etcd
// (controller-runtime's envtest), for the suites in test/envtest/v1 and
// test/envtest/v2beta1. Each suite gets its own API server, since both MPIJob
// CRDs are named mpijobs.kubeflow.org, and one webhook server built by the
// same server.New that cmd/webhook uses, registered with the webhook
// configuration that config/default installs.
package framework

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/manifests"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
)

// StartTimeout bounds starting one Env.
const StartTimeout = 2 * time.Minute

// OnInvalidWarnLabel sends a Flyte MPIJob to a second webhook server that
// runs with --on-invalid=warn; the configured webhook leaves such jobs to it.
const OnInvalidWarnLabel = "test.mpi.flyte.org/on-invalid-warn"

// Env is one API server with the MPIJob CRD of one version, and the webhook.
type Env struct {
	// Version is the MPIJob version under test: v1 or v2beta1.
	Version string
	// Client talks to the API server.
	Client client.Client
	// Webhook is the configuration from Manifests, as installed: envtest
	// points its clientConfig at the local webhook server.
	Webhook *admissionregistrationv1.MutatingWebhookConfiguration
	// Manifests is config/default rendered, what `kubectl apply -k` installs.
	Manifests *manifests.Manifests

	testEnv *envtest.Environment
	config  *rest.Config
	cancel  context.CancelFunc
	stopped sync.WaitGroup
}

// crdEnv names, per version, the environment variable that holds the path of
// its MPIJob CRD in the module cache; the Makefile sets them.
var crdEnv = map[string]string{
	"v1":      "MPIJOB_CRD_V1",
	"v2beta1": "MPIJOB_CRD_V2BETA1",
}

// Start starts an API server with the MPIJob CRD of version, registers the
// webhook configuration of config/default, rendered as a cluster gets it, and
// serves it until Stop. It returns once the API server calls the webhook; ctx
// bounds only that wait.
func Start(ctx context.Context, version string) (*Env, error) {
	crdPath := os.Getenv(crdEnv[version])
	if crdPath == "" {
		return nil, fmt.Errorf("%s is not set: run the suites with `make test`, which finds the CRD in the module cache", crdEnv[version])
	}
	crd, err := loadCRD(crdPath)
	if err != nil {
		return nil, err
	}
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	// Rendered, not config/webhook as it is: the rules and selectors that
	// config/default sets are the ones a cluster gets.
	rendered, err := manifests.Render(filepath.Join(root, "config", "default"), "")
	if err != nil {
		return nil, err
	}
	hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := rendered.Decode("MutatingWebhookConfiguration", hook); err != nil {
		return nil, err
	}
	for i := range hook.Webhooks {
		leaveToWarnServer(&hook.Webhooks[i], metav1.LabelSelectorOpDoesNotExist)
	}

	e := &Env{Version: version, Webhook: hook, Manifests: rendered}
	e.testEnv = &envtest.Environment{
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}},
		WebhookInstallOptions: envtest.WebhookInstallOptions{MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{hook}},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := e.testEnv.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest (KUBEBUILDER_ASSETS=%q): %w", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	if err := e.start(ctx, cfg); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	return e, nil
}

func (e *Env) start(ctx context.Context, cfg *rest.Config) error {
	var serving context.Context
	serving, e.cancel = context.WithCancel(context.Background())
	e.config = cfg
	var err error
	if e.Client, err = client.New(cfg, client.Options{}); err != nil {
		return err
	}

	wio := &e.testEnv.WebhookInstallOptions
	warnPort, err := freePort(wio.LocalServingHost)
	if err != nil {
		return err
	}
	warnOptions := mutate.DefaultOptions()
	warnOptions.OnInvalid = mutate.InvalidWarn
	for _, s := range []struct {
		port int
		opts mutate.Options
	}{{wio.LocalServingPort, mutate.DefaultOptions()}, {warnPort, warnOptions}} {
		if err := e.serve(ctx, serving, server.Config{
			Host: wio.LocalServingHost, Port: s.port, CertDir: wio.LocalServingCertDir,
			MetricsBindAddress: "0", HealthProbeBindAddress: "0", Mutate: s.opts,
		}); err != nil {
			return err
		}
	}

	// The warn server gets a copy of the configuration for the jobs the
	// configured webhook leaves to it.
	warn := e.Webhook.DeepCopy()
	warn.ObjectMeta = metav1.ObjectMeta{Name: e.Webhook.Name + "-on-invalid-warn"}
	for i := range warn.Webhooks {
		w := &warn.Webhooks[i]
		w.Name = "on-invalid-warn." + w.Name
		leaveToWarnServer(w, metav1.LabelSelectorOpExists)
		url := "https://" + net.JoinHostPort(wio.LocalServingHost, strconv.Itoa(warnPort)) + admission.Path
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: wio.LocalServingCAData}
	}
	if err := e.Client.Create(ctx, warn); err != nil {
		return err
	}
	return e.waitUntilCalled(ctx)
}

// waitUntilCalled returns once the API server calls both webhook servers:
// it picks up a new webhook configuration a little after storing it.
func (e *Env) waitUntilCalled(ctx context.Context) error {
	c, warnings, err := e.WarningClient()
	if err != nil {
		return err
	}
	for {
		job := e.FlyteJob("default").Annotation(mutate.AnnotationTaskCustom, FlytekitCustom).Obj()
		invalid := e.FlyteJob("default").Label(OnInvalidWarnLabel, "true").Annotation(mutate.AnnotationTaskCustom, "{").Obj()
		errJob := c.Create(ctx, job, client.DryRunAll)
		errInvalid := c.Create(ctx, invalid, client.DryRunAll)
		mutated := job.GetAnnotations()[mutate.AnnotationWorkerCommandSource] != ""
		warned := len(warnings.Messages()) > 0
		if errJob == nil && errInvalid == nil && mutated && warned {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server never called the webhook (mutated: %t, warned: %t): %w",
				mutated, warned, errors.Join(ctx.Err(), errJob, errInvalid))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WarningClient returns a client that records the warnings it receives.
func (e *Env) WarningClient() (client.Client, *WarningRecorder, error) {
	cfg := rest.CopyConfig(e.config)
	warnings := &WarningRecorder{}
	cfg.WarningHandler = warnings
	c, err := client.New(cfg, client.Options{})
	return c, warnings, err
}

// serve runs one webhook server until serving ends, and waits for it to serve TLS.
func (e *Env) serve(ctx, serving context.Context, cfg server.Config) error {
	mgr, err := server.New(cfg)
	if err != nil {
		return err
	}
	e.stopped.Add(1)
	go func() {
		defer e.stopped.Done()
		if err := mgr.Start(serving); err != nil {
			fmt.Fprintf(os.Stderr, "webhook server on port %d: %v\n", cfg.Port, err)
		}
	}()
	address := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	dialer := &net.Dialer{Timeout: time.Second}
	for {
		conn, err := tls.DialWithDialer(dialer, "tcp", address, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a readiness probe
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("webhook server on %s never served TLS: %w", address, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops the webhook servers and the API server.
func (e *Env) Stop() error {
	if e.cancel != nil {
		e.cancel()
	}
	e.stopped.Wait()
	return e.testEnv.Stop()
}

// leaveToWarnServer sets the requirement on OnInvalidWarnLabel in a webhook's object selector.
func leaveToWarnServer(w *admissionregistrationv1.MutatingWebhook, op metav1.LabelSelectorOperator) {
	if w.ObjectSelector == nil {
		w.ObjectSelector = &metav1.LabelSelector{}
	}
	w.ObjectSelector.MatchExpressions = slices.DeleteFunc(w.ObjectSelector.MatchExpressions,
		func(r metav1.LabelSelectorRequirement) bool { return r.Key == OnInvalidWarnLabel })
	w.ObjectSelector.MatchExpressions = append(w.ObjectSelector.MatchExpressions,
		metav1.LabelSelectorRequirement{Key: OnInvalidWarnLabel, Operator: op})
}

// ExcludedNamespaces lists the namespaces the webhook's namespaceSelector excludes by name.
func (e *Env) ExcludedNamespaces() []string {
	var names []string
	for _, w := range e.Webhook.Webhooks {
		if w.NamespaceSelector == nil {
			continue
		}
		for _, r := range w.NamespaceSelector.MatchExpressions {
			if r.Key == "kubernetes.io/metadata.name" && r.Operator == metav1.LabelSelectorOpNotIn {
				names = append(names, r.Values...)
			}
		}
	}
	return names
}

// loadCRD reads an MPIJob CRD and adds to its schema fields that the
// webhook's Go types do not have: spec.futureField, an object that keeps
// whatever it holds, and futureContainerField, a string in every container.
// A mutation that round-tripped the object through Go types would drop them.
func loadCRD(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the MPIJob CRD: %w", err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	preserve := true
	for i := range crd.Spec.Versions {
		root := crd.Spec.Versions[i].Schema.OpenAPIV3Schema
		spec := root.Properties["spec"]
		spec.Properties["futureField"] = apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}
		replicas := spec.Properties["mpiReplicaSpecs"]
		if replicas.AdditionalProperties == nil || replicas.AdditionalProperties.Schema == nil {
			return nil, fmt.Errorf("%s: version %s: spec.mpiReplicaSpecs is not a map", path, crd.Spec.Versions[i].Name)
		}
		template := replicas.AdditionalProperties.Schema.Properties["template"]
		podSpec := template.Properties["spec"]
		containers := podSpec.Properties["containers"]
		if containers.Items == nil || containers.Items.Schema == nil {
			return nil, fmt.Errorf("%s: version %s: no container schema", path, crd.Spec.Versions[i].Name)
		}
		containers.Items.Schema.Properties["futureContainerField"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		podSpec.Properties["containers"] = containers
		template.Properties["spec"] = podSpec
		replicas.AdditionalProperties.Schema.Properties["template"] = template
		spec.Properties["mpiReplicaSpecs"] = replicas
		root.Properties["spec"] = spec
	}
	return &crd, nil
}

// repoRoot finds the repository root: the directory of the nearest go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WarningRecorder keeps the warnings the API server sends to a client.
type WarningRecorder struct {
	mu       sync.Mutex
	messages []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (r *WarningRecorder) HandleWarningHeader(_ int, _ string, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.messages = append(r.messages, message)
}

// Messages returns the warnings received so far.
func (r *WarningRecorder) Messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.messages...)
}
