package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// expirySeconds returns the value of the certificate expiry gauge that
// controller-runtime's registry (the /metrics port's) serves, and whether it serves one.
func expirySeconds(t *testing.T) (float64, bool) {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range families {
		if family.GetName() == "flyte_mpi_webhook_serving_certificate_expiration_timestamp_seconds" {
			if len(family.GetMetric()) != 1 {
				t.Fatalf("%d series; want one", len(family.GetMetric()))
			}
			return family.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestCertificateExpiry checks that the gauge is the NotAfter of the
// certificate New loaded, and follows it when the kubelet swaps a renewed
// one into the mounted Secret.
func TestCertificateExpiry(t *testing.T) {
	ca, err := fixtures.NewAuthority()
	if err != nil {
		t.Fatal(err)
	}
	first, err := ca.IssueECDSA(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := ca.IssueECDSA(90 * 24 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := fixtures.Mount(dir, first); err != nil {
		t.Fatal(err)
	}
	previous := servingCertificates.Swap(nil)
	t.Cleanup(func() { servingCertificates.Store(previous) })
	if _, ok := expirySeconds(t); ok {
		t.Errorf("a gauge with no certificate served: an absent series is wanted, not a value that reads as expired")
	}

	cfg := DefaultConfig()
	cfg.CertDir = dir
	if _, err := New(cfg, DefaultLimits(), "/mutate", http.NotFoundHandler()); err != nil {
		t.Fatal(err)
	}
	if got, ok := expirySeconds(t); !ok || got != float64(first.Cert.NotAfter.Unix()) {
		t.Errorf("gauge %v (served: %t); want the first certificate's NotAfter %d", got, ok, first.Cert.NotAfter.Unix())
	}

	ctx, cancel := context.WithCancel(t.Context())
	watched := make(chan error, 1)
	go func() { watched <- servingCertificates.Load().Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-watched; err != nil {
			t.Errorf("watching: %v", err)
		}
	})
	if err := fixtures.Mount(dir, renewed); err != nil {
		t.Fatal(err)
	}
	want := float64(renewed.Cert.NotAfter.Unix())
	deadline := time.Now().Add(30 * time.Second) // certwatcher polls every 10 s besides its fsnotify watch
	for got, _ := expirySeconds(t); got != want; got, _ = expirySeconds(t) {
		if time.Now().After(deadline) {
			t.Fatalf("gauge %v 30 s after the renewal; want its NotAfter %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
