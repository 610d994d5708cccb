package server

import (
	"crypto/x509"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// certificateExpiry is cert-manager's certmanager_certificate_expiration_timestamp_seconds for the
// certificate served, read at each scrape from the watcher that reloads it, whatever wrote the files;
// the alert FlyteMPIWebhookCertificateExpiresSoon reads it.
var certificateExpiry = prometheus.NewDesc("flyte_mpi_webhook_serving_certificate_expiration_timestamp_seconds",
	"The NotAfter of the serving certificate the webhook holds now (Unix seconds); it follows a rotation.", nil, nil)

// servingCertificates is the watcher of the server New built last; the binary builds one.
var servingCertificates atomic.Pointer[certwatcher.CertWatcher]

// expiryCollector collects certificateExpiry, and nothing while no server
// holds a certificate: an absent series, not a zero that reads as expired.
type expiryCollector struct{}

func (expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certificateExpiry }

func (expiryCollector) Collect(ch chan<- prometheus.Metric) {
	watcher := servingCertificates.Load()
	if watcher == nil {
		return
	}
	cert, _ := watcher.GetCertificate(nil)
	if cert == nil || len(cert.Certificate) == 0 {
		return
	}
	leaf := cert.Leaf
	if leaf == nil { // tls.X509KeyPair fills Leaf since Go 1.23, unless GODEBUG=x509keypairleaf=0
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return
		}
	}
	ch <- prometheus.MustNewConstMetric(certificateExpiry, prometheus.GaugeValue, float64(leaf.NotAfter.Unix()))
}

func init() {
	metrics.Registry.MustRegister(expiryCollector{})
}
