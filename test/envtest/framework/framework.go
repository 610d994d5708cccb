// Package framework runs the webhook against a real kube-apiserver and etcd
// (controller-runtime's envtest), for the suite in test/envtest and the e2e
// suites. Each MPIJob version gets its own API server, since both MPIJob
// CRDs are named mpijobs.kubeflow.org, and one webhook server built by the
// same server.New that cmd/webhook uses, registered with the webhook
// configuration that config/default installs. InstallPolicies adds the
// admission policies of config/policy, for the jobs of one label.
package framework

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// servingHost is where the webhook servers listen, and the API server calls them.
const servingHost = "127.0.0.1"

// StartTimeout bounds starting one Env.
const StartTimeout = 2 * time.Minute

// ServeTimeout bounds the wait for a webhook server to serve TLS, and for
// the API server to send it what a new webhook configuration routes to it.
const ServeTimeout = 30 * time.Second

// OnInvalidWarnLabel sends a Flyte MPIJob to a second webhook server that
// runs with --on-invalid=warn (see ServeLabelled); the configured webhook
// leaves such jobs to it.
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
	// labelled are the servers ServeLabelled started, by label.
	labelled map[string]labelledServer
	// clientAuth is what the API server presents to the server ServeClientAuth starts.
	clientAuth *clientAuth
	stopped    sync.WaitGroup
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
// bounds only that wait. The API server presents a client certificate to the
// server ServeClientAuth starts, and to no other.
func Start(ctx context.Context, version string) (*Env, error) {
	crdPath := os.Getenv(crdEnv[version])
	if crdPath == "" {
		return nil, fmt.Errorf("%s is not set: run the suites with `make test`, which finds the CRD in the module cache", crdEnv[version])
	}
	crd, err := loadCRD(crdPath)
	if err != nil {
		return nil, err
	}
	root, err := fixtures.RepoRoot()
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

	e := &Env{Version: version, Webhook: hook, Manifests: rendered}
	e.testEnv = &envtest.Environment{
		CRDInstallOptions: envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}},
		WebhookInstallOptions: envtest.WebhookInstallOptions{LocalServingHost: servingHost,
			MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{hook}},
		ErrorIfCRDPathMissing: true,
	}
	if err := e.configureClientAuth(servingHost); err != nil {
		return nil, errors.Join(err, e.removeClientAuth())
	}
	cfg, err := e.testEnv.Start()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("starting envtest (KUBEBUILDER_ASSETS=%q): %w", os.Getenv("KUBEBUILDER_ASSETS"), err), e.removeClientAuth())
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
	if _, err := e.serve(ctx, serving, server.Config{
		Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		MetricsBindAddress: "0", HealthProbeBindAddress: "0",
	}, mutate.DefaultOptions()); err != nil {
		return err
	}
	// The API server picks up a webhook configuration a little after storing it.
	if err := e.waitForLabelled(ctx, "", true); err != nil {
		return err
	}
	warn := mutate.DefaultOptions()
	warn.OnInvalid = mutate.InvalidWarn
	return e.ServeLabelled(ctx, OnInvalidWarnLabel, warn)
}

// WarningClient returns a client that records the warnings it receives.
func (e *Env) WarningClient() (client.Client, *WarningRecorder, error) {
	cfg := rest.CopyConfig(e.config)
	warnings := &WarningRecorder{}
	cfg.WarningHandler = warnings
	c, err := client.New(cfg, client.Options{})
	return c, warnings, err
}

// serve runs one webhook server until serving ends, and waits for it to
// serve TLS. The channel it returns is closed once the server has stopped.
func (e *Env) serve(ctx, serving context.Context, cfg server.Config, opts mutate.Options) (<-chan struct{}, error) {
	mgr, err := server.New(cfg, server.DefaultLimits(), admission.Path, admission.NewHandler(opts, admission.DefaultLimits(), nil))
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	e.stopped.Add(1)
	go func() {
		defer e.stopped.Done()
		defer close(done)
		if err := mgr.Start(serving); err != nil {
			fmt.Fprintf(os.Stderr, "webhook server on port %d: %v\n", cfg.Port, err)
		}
	}()
	if err := waitForTLS(ctx, net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))); err != nil {
		return nil, err
	}
	return done, nil
}

// waitForTLS returns once address serves TLS, or ServeTimeout has passed.
func waitForTLS(ctx context.Context, address string) error {
	dialer := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: time.Second},
		Config:    &tls.Config{InsecureSkipVerify: true}, // a readiness probe: only that TLS is served
	}
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, ServeTimeout, true, func(ctx context.Context) (bool, error) {
		conn, err := dialer.DialContext(ctx, "tcp", address)
		if lastErr = err; err != nil {
			return false, nil // not listening yet
		}
		return true, conn.Close()
	})
	if err != nil {
		return fmt.Errorf("webhook server on %s never served TLS: %w", address, errors.Join(err, lastErr))
	}
	return nil
}

// Stop stops the webhook servers and the API server.
func (e *Env) Stop() error {
	if e.cancel != nil {
		e.cancel()
	}
	e.stopped.Wait()
	return errors.Join(e.testEnv.Stop(), e.removeClientAuth())
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

// FreePort returns a TCP port on host that nothing listens on now.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
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
