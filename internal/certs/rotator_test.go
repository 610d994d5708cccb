package certs

import (
	"context"
	"crypto/x509"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// fakeRotator is a Rotator of testConfig on a fake API server holding objects.
func fakeRotator(t *testing.T, now time.Time, objects ...client.Object) *Rotator {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).Build()
	cfg := testConfig()
	secret, _ := cfg.SecretKey()
	return &Rotator{config: cfg, secret: secret, certDir: t.TempDir(), issuer: issuer, client: c, reader: c,
		now: func() time.Time { return now }, log: logr.Discard()}
}

func emptySecret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "certs"}}
}

func hooks(bundle []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	h := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "hooks"}}
	for _, name := range []string{"a.example.com", "b.example.com"} {
		h.Webhooks = append(h.Webhooks, admissionregistrationv1.MutatingWebhook{Name: name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: bundle}})
	}
	return h
}

// servedFrom reads the serving certificate the Rotator wrote into its cert dir.
func servedFrom(t *testing.T, r *Rotator) func() (*x509.Certificate, error) {
	return func() (*x509.Certificate, error) {
		cert, err := os.ReadFile(filepath.Join(r.certDir, KeyCert))
		if err != nil {
			return nil, err
		}
		return leafOf(t, map[string][]byte{KeyCert: cert}), nil
	}
}

func TestBootstrapFillsTheSecretTheCABundleAndTheCertDir(t *testing.T) {
	ctx := context.Background()
	r := fakeRotator(t, t0, emptySecret(), hooks(nil))
	if err := r.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	if err := r.client.Get(ctx, r.secret, secret); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{KeyCA, KeyCAKey, KeyCert, KeyKey} {
		if len(secret.Data[key]) == 0 {
			t.Errorf("the Secret has no %s", key)
		}
	}
	h := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: "hooks"}, h); err != nil {
		t.Fatal(err)
	}
	for _, w := range h.Webhooks {
		if string(w.ClientConfig.CABundle) != string(secret.Data[KeyCA]) {
			t.Errorf("the caBundle of %s is not the Secret's ca.crt", w.Name)
		}
	}
	for _, key := range []string{KeyCert, KeyKey} {
		if got, _ := os.ReadFile(filepath.Join(r.certDir, key)); string(got) != string(secret.Data[key]) {
			t.Errorf("--cert-dir's %s is not the Secret's", key)
		}
	}
	if err := r.ReadyCheck(servedFrom(t, r))(httptest.NewRequest("GET", "/readyz", nil)); err != nil {
		t.Errorf("ReadyCheck() = %v, want nil once the caBundle trusts the certificate served", err)
	}
}

func TestBootstrapWithoutTheSecretSaysToCreateIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := fakeRotator(t, t0, hooks(nil)).Bootstrap(ctx)
	if err == nil || !strings.Contains(err.Error(), "the Secret ns/certs (--cert-secret) does not exist: the webhook never creates it; create it empty") {
		t.Errorf("Bootstrap() = %v, want the Secret named and what to do", err)
	}
}

func TestReadyCheck(t *testing.T) {
	ctx := context.Background()
	ours := applied(nil, plan(t, t0, nil, nil))
	other := applied(nil, plan(t, t0, nil, nil))
	for _, tc := range []struct {
		name   string
		hooks  *admissionregistrationv1.MutatingWebhookConfiguration
		served map[string][]byte
		want   string // a substring of the error; "" for ready
	}{
		{"the caBundle trusts what is served", hooks(ours[KeyCA]), ours, ""},
		{"the caBundle of a replacement trusts what is served", hooks(append(other[KeyCA], ours[KeyCA]...)), ours, ""},
		{"no caBundle yet", hooks(nil), ours, "the caBundle of the webhook a.example.com does not trust the certificate served"},
		{"another CA's caBundle", hooks(other[KeyCA]), ours, "does not trust the certificate served"},
		{"one webhook of two trusts it", func() *admissionregistrationv1.MutatingWebhookConfiguration {
			h := hooks(ours[KeyCA])
			h.Webhooks[1].ClientConfig.CABundle = other[KeyCA]
			return h
		}(), ours, "the caBundle of the webhook b.example.com does not trust"},
		{"no configuration", nil, ours, "reading the MutatingWebhookConfiguration hooks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objects := []client.Object{emptySecret()}
			if tc.hooks != nil {
				objects = append(objects, tc.hooks)
			}
			r := fakeRotator(t, t0.Add(time.Minute), objects...)
			served := func() (*x509.Certificate, error) { return leafOf(t, tc.served), nil }
			err := r.ReadyCheck(served)(httptest.NewRequest("GET", "/readyz", nil).WithContext(ctx))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("ReadyCheck() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("ReadyCheck() = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
