package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// maxRecheck bounds how long the Rotator goes without reading the two
// objects again, should a watch event be lost.
const maxRecheck = time.Hour

// Rotator is the controller of the webhook's own certificates (see the
// package doc). It reads the Secret and the configuration through a cache
// of those two names alone, so that its RBAC is get, list, watch and
// update of each by resourceNames, and writes with a client of its own.
type Rotator struct {
	config  Config
	secret  types.NamespacedName
	certDir string
	issuer  Issuer
	client  client.Client // writes, and the Bootstrap's reads
	reader  client.Reader // the cache's reads
	cache   cache.Cache
	now     func() time.Time
	log     logr.Logger
}

// New builds the Rotator of c, which writes the serving certificate into
// certDir (the server's --cert-dir), with restConfig's credentials.
func New(restConfig *rest.Config, c Config, certDir string, log logr.Logger) (*Rotator, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	secret, _ := c.SecretKey()
	scheme := runtime.NewScheme()
	if err := errors.Join(corev1.AddToScheme(scheme), admissionregistrationv1.AddToScheme(scheme)); err != nil {
		return nil, err
	}
	direct, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("a client of the API server, for --cert-secret: %w", err)
	}
	// A list or watch passes RBAC by resourceNames only with a field
	// selector on that name, which the cache's informers then carry.
	byName := func(name string) fields.Selector { return fields.OneTermEqualSelector("metadata.name", name) }
	objects, err := cache.New(restConfig, cache.Options{Scheme: scheme, Mapper: direct.RESTMapper(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{secret.Namespace: {}}, Field: byName(secret.Name)},
		&admissionregistrationv1.MutatingWebhookConfiguration{}: {Field: byName(c.Configuration)},
	}})
	if err != nil {
		return nil, err
	}
	return &Rotator{config: c, secret: secret, certDir: certDir, issuer: ECDSA{CommonName: "flyte-mpi-webhook-ca"},
		client: direct, reader: objects, cache: objects, now: time.Now, log: log}, nil
}

// Bootstrap reads and, as Plan says, writes the Secret and the
// configuration once, directly, and writes the serving certificate into
// the cert dir, so that the server can start with it. It retries until it
// succeeds or ctx ends.
func (r *Rotator) Bootstrap(ctx context.Context) error {
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 30*time.Second) {
		_, err := r.sync(ctx, r.client)
		if err == nil {
			return nil
		}
		r.log.Error(err, "making the serving certificate; retrying", "in", wait)
		select {
		case <-ctx.Done():
			return fmt.Errorf("making the serving certificate: %w", errors.Join(ctx.Err(), err))
		case <-time.After(wait):
		}
	}
}

// AddTo adds the cache and the controller to mgr: from then on, each
// change of the two objects, a renewal and the end of a step's Grace
// applies Plan again.
func (r *Rotator) AddTo(mgr manager.Manager) error {
	if err := mgr.Add(r.cache); err != nil {
		return err
	}
	c, err := controller.NewUnmanaged("certificates", controller.Options{
		Reconciler: r, Logger: r.log,
		// Each process has one, but a test runs several.
		SkipNameValidation: ptr.To(true),
		NeedLeaderElection: ptr.To(false),
		RateLimiter:        workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](100*time.Millisecond, 30*time.Second),
	})
	if err != nil {
		return err
	}
	one := []reconcile.Request{{NamespacedName: r.secret}}
	if err := errors.Join(
		c.Watch(source.Kind(r.cache, &corev1.Secret{},
			handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *corev1.Secret) []reconcile.Request { return one }))),
		c.Watch(source.Kind(r.cache, &admissionregistrationv1.MutatingWebhookConfiguration{},
			handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *admissionregistrationv1.MutatingWebhookConfiguration) []reconcile.Request {
				return one
			}))),
	); err != nil {
		return err
	}
	return mgr.Add(c)
}

// Reconcile implements reconcile.Reconciler: it applies Plan, through the cache.
func (r *Rotator) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	recheck, err := r.sync(ctx, r.reader)
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: min(max(recheck.Sub(r.now()), time.Second), maxRecheck)}, nil
}

// sync reads the two objects from reader, applies Plan, writes what it
// says, and the serving certificate into the cert dir; it returns when to
// plan again.
func (r *Rotator) sync(ctx context.Context, reader client.Reader) (time.Time, error) {
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, r.secret, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return time.Time{}, fmt.Errorf("the Secret %s (--cert-secret) does not exist: the webhook never creates it; create it empty", r.secret)
		}
		return time.Time{}, fmt.Errorf("reading the Secret %s (--cert-secret): %w", r.secret, err)
	}
	hooks := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := reader.Get(ctx, types.NamespacedName{Name: r.config.Configuration}, hooks); err != nil {
		if !apierrors.IsNotFound(err) {
			return time.Time{}, fmt.Errorf("reading the MutatingWebhookConfiguration %s: %w", r.config.Configuration, err)
		}
		hooks = nil // not installed yet: the certificates all the same
	}

	step, err := Plan(r.config, r.now(), secret.Data, published(hooks), r.issuer)
	if err != nil {
		return time.Time{}, err
	}
	if step.Data != nil {
		secret = secret.DeepCopy()
		secret.Data = step.Data
		if err := r.client.Update(ctx, secret); err != nil {
			return time.Time{}, fmt.Errorf("writing the Secret %s (%s): %w", r.secret, step, err)
		}
		r.log.Info("wrote the Secret", "secret", r.secret, "changes", step.Changes)
	}
	if err := r.writeFiles(secret.Data); err != nil {
		return time.Time{}, err
	}
	if hooks != nil && !holdsOnly(hooks, step.CABundle) {
		hooks = hooks.DeepCopy()
		for i := range hooks.Webhooks {
			hooks.Webhooks[i].ClientConfig.CABundle = step.CABundle
		}
		if err := r.client.Update(ctx, hooks); err != nil {
			return time.Time{}, fmt.Errorf("writing the caBundle of the MutatingWebhookConfiguration %s: %w", hooks.Name, err)
		}
		r.log.Info("wrote the caBundle", "mutatingWebhookConfiguration", hooks.Name, "cas", len(CAs(step.CABundle)))
	}
	return step.Recheck, nil
}

// published is the caBundle every webhook of hooks holds, or nil when
// they differ or there is none.
func published(hooks *admissionregistrationv1.MutatingWebhookConfiguration) []byte {
	if hooks == nil || len(hooks.Webhooks) == 0 {
		return nil
	}
	bundle := hooks.Webhooks[0].ClientConfig.CABundle
	if !holdsOnly(hooks, bundle) {
		return nil
	}
	return bundle
}

func holdsOnly(hooks *admissionregistrationv1.MutatingWebhookConfiguration, bundle []byte) bool {
	for _, w := range hooks.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			return false
		}
	}
	return true
}

// writeFiles writes tls.crt and tls.key into the cert dir when they
// differ, each replaced whole (a rename), which the server's watcher reloads.
func (r *Rotator) writeFiles(data map[string][]byte) error {
	for _, name := range []string{KeyCert, KeyKey} {
		path := filepath.Join(r.certDir, name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data[name]) {
			continue
		}
		if err := writeFile(path, data[name]); err != nil {
			return fmt.Errorf("writing the serving certificate into --cert-dir: %w", err)
		}
	}
	return nil
}

func writeFile(path string, content []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // once renamed, nothing to remove
	if _, err := f.Write(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// ReadyCheck fails until served, the certificate the server serves now,
// verifies with the caBundle of every webhook of the configuration, as the
// API server verifies it, for the first of the DNS names: a pod is Ready
// only once the API server can call it.
func (r *Rotator) ReadyCheck(served func() (*x509.Certificate, error)) healthz.Checker {
	return func(req *http.Request) error {
		leaf, err := served()
		if err != nil {
			return err
		}
		hooks := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := r.reader.Get(req.Context(), types.NamespacedName{Name: r.config.Configuration}, hooks); err != nil {
			return fmt.Errorf("reading the MutatingWebhookConfiguration %s: %w", r.config.Configuration, err)
		}
		if len(hooks.Webhooks) == 0 {
			return fmt.Errorf("the MutatingWebhookConfiguration %s has no webhook", hooks.Name)
		}
		for _, w := range hooks.Webhooks {
			if err := Verify(leaf, CAs(w.ClientConfig.CABundle), r.config.DNSNames[0], r.now()); err != nil {
				return fmt.Errorf("the caBundle of the webhook %s does not trust the certificate served: %w", w.Name, err)
			}
		}
		return nil
	}
}
