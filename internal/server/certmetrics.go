package server

import (
	"crypto/x509"
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// certificateExpiry is cert-manager's certmanager_certificate_expiration_timestamp_seconds for the certificate
// served (ServedCertificate), read at each scrape; the alert FlyteMPIWebhookCertificateExpiresSoon reads it.
var certificateExpiry = prometheus.NewDesc("flyte_mpi_webhook_serving_certificate_expiration_timestamp_seconds",
	"The NotAfter of the serving certificate the webhook holds now (Unix seconds); it follows a rotation.", nil, nil)

// servingCertificates is the watcher of the server New built last; the binary builds one.
var servingCertificates atomic.Pointer[certwatcher.CertWatcher]

// expiryCollector collects certificateExpiry, and nothing while none is served: no series, not a zero read as expired.
type expiryCollector struct{}

func (expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certificateExpiry }

func (expiryCollector) Collect(ch chan<- prometheus.Metric) {
	if leaf, err := ServedCertificate(); err == nil {
		ch <- prometheus.MustNewConstMetric(certificateExpiry, prometheus.GaugeValue, float64(leaf.NotAfter.Unix()))
	}
}

var errNoCertificate = errors.New("no serving certificate loaded")

// ServedCertificate is the certificate the server New built last serves now, as its watcher last read the files.
func ServedCertificate() (*x509.Certificate, error) {
	watcher := servingCertificates.Load()
	if watcher == nil {
		return nil, errNoCertificate
	}
	switch cert, err := watcher.GetCertificate(nil); {
	case err != nil:
		return nil, err
	case cert == nil || len(cert.Certificate) == 0:
		return nil, errNoCertificate
	case cert.Leaf == nil: // tls.X509KeyPair fills Leaf since Go 1.23, unless GODEBUG=x509keypairleaf=0
		return x509.ParseCertificate(cert.Certificate[0])
	default:
		return cert.Leaf, nil
	}
}

func init() { metrics.Registry.MustRegister(expiryCollector{}) }
