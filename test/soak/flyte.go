package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// flyteReview returns the review of the MPIJob Flyte builds for a Horovod
// task that declares its worker command.
func flyteReview() []byte {
	return reviewOf(must(fixtures.FlyteJob("v1", fixtures.HorovodWorkerCommand)))
}

// flyteReviews posts review perSecond until ctx ends, as the API server
// does, and returns the latencies, how many were answered 200 with want,
// what the others got, and how many were posted again after a Retry-After.
// A request never written, its connection refused or reset before the TLS
// handshake because the listener closed, is counted in neither: it calls refused.
func flyteReviews(ctx context.Context, client *http.Client, url string, review []byte, want string, perSecond int, refused func()) (
	latencies []time.Duration, correct int, wrong []string, retried int) {
	mu, wg := sync.Mutex{}, sync.WaitGroup{}
	interval := time.Second / time.Duration(perSecond)
	for next := time.Now(); ; next = next.Add(interval) {
		time.Sleep(time.Until(next)) // one that is late goes at once: the API server does not wait for the soak
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			var wrote atomic.Bool
			trace := &httptrace.ClientTrace{WroteRequest: func(w httptrace.WroteRequestInfo) { wrote.Store(w.Err == nil) }}
			start := time.Now()
			status, patch, retries, err := postAsAPIServer(httptrace.WithClientTrace(context.Background(), trace), client, url, review)
			mu.Lock()
			defer mu.Unlock()
			if retries > 0 {
				retried++
			}
			switch {
			case err != nil && refused != nil && !wrote.Load():
				refused()
				return
			case status == http.StatusOK && patch == want:
				correct++
			case err != nil && os.IsTimeout(err):
				wrong = append(wrong, "timed out")
			case err != nil:
				wrong = append(wrong, cause(err))
			default:
				wrong = append(wrong, fmt.Sprint(status))
			}
			latencies = append(latencies, time.Since(start))
		})
	}
	wg.Wait()
	return latencies, correct, wrong, retried
}

// cause returns the innermost cause err names, such as "connection refused" or "EOF".
func cause(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// count returns how many times each of answers occurs.
func count(answers []string) map[string]int {
	counts := map[string]int{}
	for _, a := range answers {
		counts[a]++
	}
	return counts
}

// postAsAPIServer posts body as the API server calls a webhook: within its
// timeoutSeconds (5) in all, and, as client-go's rest.Request does, again
// after the Retry-After of an answer 429 or 5xx that has one, up to 10 times.
// It returns the last answer's status and patch, and how often it posted again.
func postAsAPIServer(ctx context.Context, client *http.Client, url string, body []byte) (status int, patch string, retries int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for ; ; retries++ {
		var retryAfter time.Duration
		status, patch, retryAfter, err = post(ctx, client, url, body)
		if retryAfter == 0 || retries == 10 {
			return status, patch, retries, err
		}
		select {
		case <-ctx.Done():
			return status, patch, retries, ctx.Err()
		case <-time.After(retryAfter):
		}
	}
}

// post sends body and returns the status, for an allowed review its patch,
// and for an answer 429 or 5xx its Retry-After.
func post(ctx context.Context, client *http.Client, url string, body []byte) (status int, patch string, retryAfter time.Duration, err error) {
	req := must(http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if seconds, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500) {
			retryAfter = time.Duration(seconds) * time.Second
		}
		return resp.StatusCode, "", retryAfter, nil
	}
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || review.Response == nil || !review.Response.Allowed {
		return resp.StatusCode, "", 0, err
	}
	return resp.StatusCode, string(review.Response.Patch), 0, nil
}

// probe GETs /healthz and /readyz every -probe-every until ctx ends, each on
// a new connection within -probe-timeout, as the kubelet does, and returns
// how many of each were not answered 200 in time, of rounds. /readyz does a
// TLS handshake with the webhook port, so it fails where that port is full.
func probe(ctx context.Context, address string) (healthz, readyz, rounds int) {
	client := &http.Client{Timeout: *probeTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	ok := func(path string) bool {
		resp, err := client.Get("http://" + address + path)
		return err == nil && resp.Body.Close() == nil && resp.StatusCode == http.StatusOK
	}
	for tick := time.Tick(*probeEvery); ctx.Err() == nil; <-tick {
		rounds++
		if !ok("/healthz") {
			healthz++
		}
		if !ok("/readyz") {
			readyz++
		}
	}
	return healthz, readyz, rounds
}
