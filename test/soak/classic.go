package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// The first soak's attack, which the classic scenario runs.
var (
	tricklers   = flag.Int("tricklers", 300, "classic, small-trickle: connections trickling a body")
	trickleRate = flag.Int("trickle-rate", 128<<10, "classic: bytes per second each trickling connection sends")
	posters     = flag.Int("posters", 50, "classic: clients posting large reviews back to back")
	bigBytes    = flag.Int("big-bytes", 3<<20-4<<10, "classic: size of the large reviews, just below the webhook's limit")
	rotateEvery = flag.Duration("rotate-every", 8*time.Second, "classic: how often the certificate is replaced")
	drainFor    = flag.Duration("drain", 5*time.Second, "the webhook's --shutdown-drain")
)

// classic runs -tricklers connections that each declare a 3 MiB body and
// send it slowly, -posters clients posting reviews of -big-bytes back to
// back, and a certificate rotation every -rotate-every.
func classic(ctx context.Context, w *webhook) string {
	var trickled, requests, posted, bigAllowed atomic.Int64
	var rotations []string
	var wg sync.WaitGroup
	wg.Go(func() { trickle(ctx, w, 3<<20, *trickleRate, &trickled, &requests) })
	big := bigReview()
	for range *posters {
		wg.Go(func() {
			for c := (&http.Client{Transport: attackTransport(w, true, 25)}); ctx.Err() == nil; posted.Add(1) {
				if status, _, _, _ := post(ctx, c, w.url, big); status == http.StatusOK {
					bigAllowed.Add(1)
				}
			}
		})
	}
	wg.Go(func() { rotations = rotate(ctx, w) })
	wg.Wait()
	return fmt.Sprintf("%d tricklers wrote %d MiB in %d requests; %d posters sent %d reviews of %d bytes, %d answered 200; rotations: %s",
		*tricklers, trickled.Load()>>20, requests.Load(), *posters, posted.Load(), len(big), bigAllowed.Load(), strings.Join(rotations, ", "))
}

// rotate swaps in a renewed certificate, as the kubelet swaps a Secret,
// every -rotate-every until ctx ends, and says when new connections got each.
func rotate(ctx context.Context, w *webhook) (served []string) {
	for tick := time.Tick(*rotateEvery); ; {
		select {
		case <-ctx.Done():
			return served
		case <-tick:
		}
		cert, start := w.issue(), time.Now()
		must(0, fixtures.Mount(w.certDir, cert))
		serial := cert.Cert.SerialNumber.String()
		for servedSerial(w.address) != serial && time.Since(start) < 15*time.Second {
			time.Sleep(10 * time.Millisecond)
		}
		if servedSerial(w.address) != serial {
			served = append(served, "not served after 15s")
			w.missed = append(w.missed, fmt.Sprintf("certificate %s not served 15 s after it was written", serial))
			continue
		}
		served = append(served, "served after "+time.Since(start).Round(time.Millisecond).String())
	}
}

// drain SIGTERMs the webhook under the Flyte reviews, on new connections as
// the API server sends them once the drain's first answers closed its own,
// and reports whether every review was answered until the listener closed,
// /readyz failed before it, and the webhook exited 0.
func drain(w *webhook, legit []byte, want string) bool {
	sigterm := time.Now()
	if w.cmd.Process.Signal(syscall.SIGTERM) != nil {
		return false
	}
	// As the kubelet does after terminationGracePeriodSeconds (30).
	defer time.AfterFunc(30*time.Second, func() { _ = w.cmd.Process.Kill() }).Stop()
	unready := make(chan time.Duration, 1)
	go func() { // a kubelet's probe, only more often
		for w.ready() {
			time.Sleep(time.Millisecond)
		}
		unready <- time.Since(sigterm)
	}()
	ctx, closed := context.WithCancel(context.Background())
	var closedAfter time.Duration
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: w.tls, DisableKeepAlives: true}}
	_, answered, wrong, _ := flyteReviews(ctx, client, w.url, legit, want, *rate+*newRate, func() {
		if ctx.Err() == nil {
			closedAfter = time.Since(sigterm)
			closed()
		}
	})
	<-w.exited
	unreadyAfter := <-unready
	fmt.Printf("%-16s drain: unready %s after SIGTERM, listener closed after %s; %d reviews answered correctly after SIGTERM, %d not %v; exit: %v\n",
		"classic", unreadyAfter.Round(time.Millisecond), closedAfter.Round(time.Millisecond), answered, len(wrong), count(wrong), w.exitErr)
	return w.exitErr == nil && len(wrong) == 0 && answered > 0 && unreadyAfter < closedAfter
}

// smallTrickle runs -tricklers connections that each declare a small body,
// a 32nd of the webhook's budget of body bytes (admission.DefaultLimits().MaxBufferedBytes),
// and send it at 8 KiB/s: 32 of them fill the budget to its last byte, so
// that a review finds room only where the oldest of them is aborted.
func smallTrickle(ctx context.Context, w *webhook) string {
	var trickled, requests atomic.Int64
	trickle(ctx, w, admission.DefaultLimits().MaxBufferedBytes/32, 8<<10, &trickled, &requests)
	return fmt.Sprintf("%d tricklers of %d bytes wrote %d MiB in %d requests",
		*tricklers, admission.DefaultLimits().MaxBufferedBytes/32, trickled.Load()>>20, requests.Load())
}

// trickle runs -tricklers connections that each declare a body of size,
// send it at rate bytes a second, and start again once answered, until ctx ends.
func trickle(ctx context.Context, w *webhook, size int64, rate int, sent, requests *atomic.Int64) {
	var wg sync.WaitGroup
	for range *tricklers {
		wg.Go(func() {
			c := &http.Client{Transport: attackTransport(w, false, 0)}
			for ctx.Err() == nil {
				req := must(http.NewRequestWithContext(ctx, http.MethodPost, w.url, slowBody{ctx, rate, sent}))
				req.ContentLength = size
				req.Header.Set("Content-Type", "application/json")
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				}
				requests.Add(1)
			}
		})
	}
	wg.Wait()
}

// slowBody is a body that arrives at rate bytes a second until ctx ends.
type slowBody struct {
	ctx  context.Context
	rate int
	sent *atomic.Int64
}

func (b slowBody) Read(p []byte) (int, error) {
	time.Sleep(time.Second / 8)
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	n := min(len(p), b.rate/8)
	b.sent.Add(int64(n))
	return n, nil
}

// bigReview returns the Flyte review with an annotation that brings it to
// -big-bytes, as a large last-applied-configuration does.
func bigReview() []byte {
	legit := flyteReview()
	job := must(fixtures.FlyteJob("v1", fixtures.HorovodWorkerCommand))
	job.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", *bigBytes-len(legit)-60)})
	return reviewOf(job)
}

// servedSerial returns the serial of the certificate a new connection gets.
func servedSerial(address string) string {
	conn, err := tls.Dial("tcp", address, &tls.Config{InsecureSkipVerify: true}) // reads the certificate only
	if err != nil {
		return ""
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}
