//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// rotation is one certificate rotation during a soak.
type rotation struct {
	// At is when the new certificate was written, from the start of the soak.
	At time.Duration
	// Served is how long after that a new connection first got it; 0 if never.
	Served time.Duration
}

// rotator replaces the webhook's certificate every interval, the way
// cert-manager's renewal reaches a pod (installCertificate), and meanwhile
// opens a new connection every probeEvery to send one request: the load's
// own keep-alive connections keep their TLS sessions, so only new
// connections show whether a rotation ever fails a handshake.
type rotator struct {
	mu        sync.Mutex
	rotations []rotation
	probes    int
	failures  []string
	stop      context.CancelFunc
	done      chan struct{}
}

// rotateEvery starts rotating f.Webhook's certificate, but not after until
// (from now), so that the last rotation has time to be served; Stop ends it.
func (f *fixture) rotateEvery(ctx context.Context, every, until, probeEvery time.Duration, body []byte, out io.Writer) *rotator {
	ctx, cancel := context.WithCancel(ctx)
	r := &rotator{stop: cancel, done: make(chan struct{})}
	start := time.Now()
	var want *x509.Certificate // the certificate a new connection should get next; nil until a rotation
	go func() {
		defer close(r.done)
		rotate := time.NewTicker(every)
		defer rotate.Stop()
		probe := time.NewTicker(probeEvery)
		defer probe.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-rotate.C:
				if time.Since(start) > until {
					continue
				}
				cert, err := f.Authority.issue(24 * time.Hour)
				if err == nil {
					err = installCertificate(f.Webhook.CertDir, cert)
				}
				if err == nil {
					block, _ := pem.Decode(cert.CertPEM)
					want, err = x509.ParseCertificate(block.Bytes)
				}
				if err != nil {
					r.fail(fmt.Sprintf("rotating: %v", err))
					continue
				}
				r.mu.Lock()
				r.rotations = append(r.rotations, rotation{At: time.Since(start)})
				r.mu.Unlock()
				fmt.Fprintf(out, "rotation t=%-6s wrote certificate serial %s\n", time.Since(start).Round(time.Second), want.SerialNumber)
			case <-probe.C:
				served, err := f.probe(ctx, body)
				r.mu.Lock()
				r.probes++
				r.mu.Unlock()
				if err != nil {
					if ctx.Err() == nil {
						r.fail(err.Error())
					}
					continue
				}
				if want != nil && served.Equal(want) {
					r.mu.Lock()
					last := &r.rotations[len(r.rotations)-1]
					if last.Served == 0 {
						last.Served = time.Since(start) - last.At
						fmt.Fprintf(out, "rotation t=%-6s new connections get serial %s, %s after it was written\n",
							time.Since(start).Round(time.Second), want.SerialNumber, last.Served.Round(time.Millisecond))
					}
					r.mu.Unlock()
				}
			}
		}
	}()
	return r
}

func (r *rotator) fail(message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, message)
}

// Stop ends the rotations and returns what they saw.
func (r *rotator) Stop() (rotations []rotation, probes int, failures []string) {
	r.stop()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rotations, r.probes, r.failures
}

// probe sends one request over a new, verified TLS connection, and returns
// the certificate the webhook served on it.
func (f *fixture) probe(ctx context.Context, body []byte) (*x509.Certificate, error) {
	u, err := url.Parse(f.Webhook.URL)
	if err != nil {
		return nil, err
	}
	var served *x509.Certificate
	tlsConfig := clientTLS(f.Authority.Pool, false)
	tlsConfig.VerifyConnection = func(cs tls.ConnectionState) error {
		served = cs.PeerCertificates[0]
		return nil
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("probe on a new connection: %w", err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || !isAnswer(answer, true) {
		return nil, fmt.Errorf("probe on a new connection: status %d, %v: %.200s", resp.StatusCode, err, answer)
	}
	return served, nil
}
