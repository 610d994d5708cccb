package framework

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/certs"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
)

// OwnCertificatesHost is the name the API server calls the server
// ServeOwnCertificates starts by, the DNS name of its certificate.
const OwnCertificatesHost = "localhost"

// UserConfig returns the credentials of a user of that name, in no group:
// what RBAC grants it is all it may do, as the webhook's ServiceAccount.
func (e *Env) UserConfig(name string) (*rest.Config, error) {
	user, err := e.testEnv.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		return nil, err
	}
	return user.Config(), nil
}

// OwnCertificates is a server ServeOwnCertificates started.
type OwnCertificates struct {
	// Configuration is the MutatingWebhookConfiguration whose caBundle it writes.
	Configuration string
	// ProbeAddress serves /readyz.
	ProbeAddress string
	// Stop stops the server, and returns once it no longer serves.
	Stop func()
}

// ServeOwnCertificates starts one more webhook server, for the Flyte
// MPIJobs that carry the label key label, whose certificates it keeps
// itself, as the binary does with --cert-secret (cmd/webhook's
// ownCertificates): c's Secret must exist; c.Configuration is installed
// here, a copy of the webhook configuration with no caBundle, for
// OwnCertificatesHost; the Rotator reads and writes with restConfig's
// credentials. It returns once the server serves, before the API server
// need trust it. The server runs until Stop, or the Env's.
func (e *Env) ServeOwnCertificates(ctx context.Context, label string, restConfig *rest.Config, c certs.Config) (*OwnCertificates, error) {
	if err := e.LeaveLabelled(ctx, label); err != nil {
		return nil, err
	}
	port, err := FreePort(servingHost)
	if err != nil {
		return nil, err
	}
	probePort, err := FreePort(servingHost)
	if err != nil {
		return nil, err
	}
	own := &OwnCertificates{Configuration: c.Configuration, ProbeAddress: net.JoinHostPort(servingHost, strconv.Itoa(probePort))}

	hook := e.Webhook.DeepCopy()
	hook.ObjectMeta = metav1.ObjectMeta{Name: c.Configuration}
	url := "https://" + net.JoinHostPort(OwnCertificatesHost, strconv.Itoa(port)) + admission.Path
	for i := range hook.Webhooks {
		w := &hook.Webhooks[i]
		w.Name = "own-certificates." + w.Name
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
		requireLabel(w, label, metav1.LabelSelectorOpExists)
	}
	if err := e.Client.Create(ctx, hook); err != nil {
		return nil, err
	}

	// What cmd/webhook's ownCertificates does, then serve.
	certDir, err := os.MkdirTemp("", "own-certificates-")
	if err != nil {
		return nil, err
	}
	cfg := server.Config{Host: servingHost, Port: port, CertDir: certDir, MetricsBindAddress: "0", HealthProbeBindAddress: own.ProbeAddress}
	rotator, err := certs.New(restConfig, c, cfg.CertDir, ctrl.Log.WithName("certificates"))
	if err != nil {
		return nil, err
	}
	if err := rotator.Bootstrap(ctx); err != nil {
		return nil, err
	}
	cfg.ReadyCheck = rotator.ReadyCheck(server.ServedCertificate)
	mgr, err := server.New(cfg, server.DefaultLimits(), admission.Path, admission.NewHandler(mutate.DefaultOptions(), admission.DefaultLimits(), nil))
	if err != nil {
		return nil, err
	}
	if err := rotator.AddTo(mgr); err != nil {
		return nil, err
	}
	serving, cancel := context.WithCancel(context.Background())
	stopOthers := e.cancel
	e.cancel = func() { cancel(); stopOthers() }
	done := make(chan struct{})
	e.stopped.Add(1)
	go func() {
		defer e.stopped.Done()
		defer close(done)
		if err := mgr.Start(serving); err != nil {
			ctrl.Log.Error(err, "webhook server with its own certificates", "port", port)
		}
	}()
	own.Stop = func() { cancel(); <-done; os.RemoveAll(certDir) }
	if err := waitForTLS(ctx, net.JoinHostPort(servingHost, strconv.Itoa(port))); err != nil {
		own.Stop()
		return nil, fmt.Errorf("the server with its own certificates: %w", err)
	}
	return own, nil
}
