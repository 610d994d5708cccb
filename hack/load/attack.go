//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"slices"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/flyteorg/flyte-mpi-webhook/hack/benchtable/table"
)

// attackSpec is one attack on one server.
type attackSpec struct {
	// Rate is requests per second; 0 sends as fast as MaxWorkers concurrent requests allow.
	Rate int
	// Duration is how long requests are sent.
	Duration time.Duration
	// MaxWorkers bounds the concurrent requests; 0 lets vegeta add workers as the rate needs.
	MaxWorkers uint64
}

// round is what one attack on one server measured.
type round struct {
	// Requests and Errors count the requests, and those that failed: a
	// transport error, a status other than 200, or a body that is not the
	// expected answer.
	Requests, Errors int
	// ErrorSamples are a few distinct errors, for the report.
	ErrorSamples []string
	// P50, P99 and Max are latency percentiles.
	P50, P99, Max time.Duration
	// Rate and Throughput are the requests sent, and answered well, per second.
	Rate, Throughput float64
	// PeakRSS is the server's highest resident set size sampled during the attack; 0 when unknown.
	PeakRSS int64
	// CPUPerRequest is the server's CPU time during the attack, per request; 0 when unknown.
	CPUPerRequest time.Duration
}

// client is the load tool's HTTP client for one server: HTTP/1.1 with
// keep-alive, as the API server talks to a webhook that does not offer
// HTTP/2, and a timeout of the webhook configuration's timeoutSeconds.
func newClient(tlsConfig *tls.Config) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     tlsConfig,
			TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // no HTTP/2
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
		},
	}
}

// attack sends AdmissionReview bodies, in turn, to s with client until
// spec.Duration has passed or ctx is done, and returns what it measured on
// the client's side. wantPatch says whether every answer must carry a JSON
// patch (the webhook's) or none (the no-op's).
func attack(ctx context.Context, client *http.Client, s *server, bodies [][]byte, spec attackSpec, wantPatch bool) round {
	targets := make([]vegeta.Target, len(bodies))
	for i, b := range bodies {
		targets[i] = vegeta.Target{Method: http.MethodPost, URL: s.URL, Body: b,
			Header: http.Header{"Content-Type": []string{"application/json"}}}
	}
	opts := []func(*vegeta.Attacker){vegeta.Client(client)}
	if spec.MaxWorkers > 0 {
		opts = append(opts, vegeta.Workers(spec.MaxWorkers), vegeta.MaxWorkers(spec.MaxWorkers))
	}
	attacker := vegeta.NewAttacker(opts...)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			attacker.Stop()
		case <-done:
		}
	}()
	var (
		metrics   vegeta.Metrics
		latencies []time.Duration
		r         round
	)
	for res := range attacker.Attack(vegeta.NewStaticTargeter(targets...), vegeta.ConstantPacer{Freq: spec.Rate, Per: time.Second}, spec.Duration, s.Name) {
		if res.Error == "" && !isAnswer(res.Body, wantPatch) {
			res.Error = "not the expected answer: " + string(res.Body[:min(len(res.Body), 200)])
		}
		metrics.Add(res)
		latencies = append(latencies, res.Latency)
		r.Requests++
		if res.Error != "" {
			r.Errors++
			if len(r.ErrorSamples) < 5 && !slices.Contains(r.ErrorSamples, res.Error) {
				r.ErrorSamples = append(r.ErrorSamples, res.Error)
			}
		}
	}
	metrics.Close()
	r.P50, r.P99, r.Max = table.Percentile(latencies, 50), table.Percentile(latencies, 99), table.Percentile(latencies, 100)
	r.Rate, r.Throughput = metrics.Rate, metrics.Throughput
	return r
}

// isAnswer tells whether body allows the review, with a patch or without one as wanted.
func isAnswer(body []byte, wantPatch bool) bool {
	return bytes.Contains(body, []byte(`"allowed":true`)) && bytes.Contains(body, []byte(`"patch":`)) == wantPatch
}
