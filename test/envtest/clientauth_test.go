package envtest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// clientAuthLabel sends a Flyte MPIJob to the server run with --client-ca-name.
const clientAuthLabel = "test.mpi.flyte.org/client-auth"

// describeClientAuth declares the specs of a webhook run with
// --client-ca-name, behind an API server that presents its client
// certificate through its admission kubeconfig (framework.ServeClientAuth).
func describeClientAuth(s *spec) bool {
	return Describe("with --client-ca-name, behind an API server that presents its client certificate", func() {
		BeforeAll(func(ctx SpecContext) {
			Expect(s.env.ServeClientAuth(ctx, clientAuthLabel, mutate.DefaultOptions())).To(Succeed())
		})

		It("mutates the jobs the API server sends", func(ctx SpecContext) {
			stored := s.create(ctx, s.job(fixtures.HorovodWorkerCommand).Label(clientAuthLabel, "true").Obj())
			expectWorker(stored, fixtures.SSHD, mutate.SourceFlyteWorkerArgs)
		})

		It("refuses a client without a certificate at the TLS handshake", func() {
			err := withoutCertificate(context.Background(), &net.Dialer{}, s.env.ClientAuthAddress(), s.env.ServingCAs())
			Expect(err).To(MatchError(ContainSubstring("tls: certificate required")))
		})

		It("answers the API server while clients without a certificate flood it with handshakes and silent connections", func(ctx SpecContext) {
			// From other addresses than the API server's, as pods': where
			// the soak's attacks hold every target.
			flood := startFlood(s.env.ClientAuthAddress(), s.env.ServingCAs(), net.IPv4(127, 0, 0, 2), net.IPv4(127, 0, 0, 3))
			DeferCleanup(flood.stop)
			// The creations start once the flood's handshakes are refused.
			Eventually(flood.refused.Load).WithTimeout(framework.ServeTimeout).Should(BeNumerically(">=", 100),
				"handshakes refused for want of a certificate")
			before := flood.refused.Load()
			var took []time.Duration
			for range 20 {
				start := time.Now()
				stored := s.create(ctx, s.job(fixtures.HorovodWorkerCommand).Label(clientAuthLabel, "true").Obj())
				took = append(took, time.Since(start))
				expectWorker(stored, fixtures.SSHD, mutate.SourceFlyteWorkerArgs)
			}
			refused, closed := flood.stop()
			slices.Sort(took)
			GinkgoWriter.Printf("20 creations beside the flood: median %s, slowest %s; the flood's handshakes: %d refused for want of a certificate, %d closed before\n",
				took[len(took)/2], took[len(took)-1], refused, closed)
			Expect(refused).To(BeNumerically(">", before), "handshakes refused while the API server created the jobs")
		})
	})
}

// withoutCertificate connects to address with TLS, trusting roots and
// presenting no certificate, and returns how the server ended the
// connection. With TLS 1.3 the client's handshake ends before the server's
// verdict, which the first read gets; nothing is written, so no reset can
// overtake the server's alert.
func withoutCertificate(ctx context.Context, dialer *net.Dialer, address string, roots *x509.CertPool) error {
	conn, err := (&tls.Dialer{NetDialer: dialer, Config: &tls.Config{RootCAs: roots}}).DialContext(ctx, "tcp", address)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Read(make([]byte, 1))
	return err
}

// flood is a flood of clients without a certificate, from one address.
type flood struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// refused and closed count the flood's handshakes: refused by the
	// server's alert for want of a certificate, or closed before (a
	// connection reset for another address's, a handshake past its second, or one
	// that found no place in time).
	refused, closed atomic.Int64
}

// The flood's size: handshakes back to back, and connections held silent:
// more than the webhook's 512 places, opened again as they are closed.
const (
	floodHandshakers = 32
	floodSilent      = 600
)

// startFlood floods address, until stop, with handshakes that present no
// certificate, from handshakers, each as soon as the last ended, and with
// silent connections that send nothing, from silent. Each handshake costs
// the webhook a signature before it can refuse it; a review it never gets
// to read.
func startFlood(address string, roots *x509.CertPool, handshakers, silent net.IP) *flood {
	ctx, cancel := context.WithCancel(context.Background())
	f := &flood{cancel: cancel}
	for range floodHandshakers {
		f.wg.Go(func() {
			for ctx.Err() == nil {
				err := withoutCertificate(ctx, &net.Dialer{LocalAddr: &net.TCPAddr{IP: handshakers}}, address, roots)
				switch {
				case ctx.Err() != nil:
				case err != nil && strings.Contains(err.Error(), "tls: certificate required"):
					f.refused.Add(1)
				default:
					f.closed.Add(1)
				}
			}
		})
	}
	for range floodSilent {
		f.wg.Go(func() {
			for ctx.Err() == nil {
				conn, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: silent}}).DialContext(ctx, "tcp", address)
				if err != nil {
					select { // a port that refuses connections is not to be spun against
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				stop := context.AfterFunc(ctx, func() { conn.Close() })
				_, _ = conn.Read(make([]byte, 1)) // until the webhook closes it, or the flood stops
				stop()
				conn.Close()
			}
		})
	}
	return f
}

// stop ends the flood, and returns how its handshakes ended.
func (f *flood) stop() (refused, closed int64) {
	f.cancel()
	f.wg.Wait()
	return f.refused.Load(), f.closed.Load()
}
