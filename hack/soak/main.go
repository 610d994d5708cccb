// Command soak runs bin/webhook on loopback under hostile load, with
// certificate rotation, then through SIGTERM, and exits 1 when a target of
// docs/RELIABILITY.md is missed.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

var (
	binary      = flag.String("webhook", "bin/webhook", "the webhook binary")
	duration    = flag.Duration("duration", time.Minute, "how long the attack lasts")
	rate        = flag.Int("rate", 50, "Flyte reviews per second")
	tricklers   = flag.Int("tricklers", 300, "connections trickling a body")
	trickleRate = flag.Int("trickle-rate", 128<<10, "bytes per second each trickling connection sends")
	posters     = flag.Int("posters", 50, "clients posting large reviews back to back")
	bigBytes    = flag.Int("big-bytes", 3<<20-4<<10, "size of the large reviews, just below the webhook's limit")
	rotateEvery = flag.Duration("rotate-every", 20*time.Second, "how often the certificate is replaced")
	drain       = flag.Duration("drain", 5*time.Second, "the webhook's --shutdown-drain")
	maxRSS      = flag.Float64("max-rss-mib", 100, "target: peak resident memory (VmHWM) in MiB")
	minCorrect  = flag.Float64("min-correct", 0.99, "target: share of Flyte reviews answered 200 with the expected patch")
	maxP99      = flag.Duration("max-p99", time.Second, "target: 99th percentile latency of the Flyte reviews")
)

var missed []string

// check records a missed target unless ok.
func check(ok bool, format string, args ...any) {
	if !ok {
		missed = append(missed, fmt.Sprintf(format, args...))
	}
}

// must returns v, or ends the soak with err.
func must[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	return v
}

func main() {
	flag.Parse()
	run()
	if len(missed) > 0 {
		fmt.Println("MISSED: " + strings.Join(missed, "\nMISSED: "))
		os.Exit(1)
	}
	fmt.Println("all targets met")
}

func run() {
	dir := must(os.MkdirTemp("", "soak"))
	defer os.RemoveAll(dir)
	ca := must(fixtures.NewAuthority())
	certDir := filepath.Join(dir, "certs")
	must(0, fixtures.Mount(certDir, must(ca.Issue(time.Hour)))) // as the kubelet mounts a Secret
	memoryLimit := deploymentMemoryLimit()
	port, probe := freePort(), freePort()
	cmd := exec.Command(*binary, "--cert-dir", certDir, "--port", strconv.Itoa(port), "--metrics-bind-address", "0",
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(probe), "--shutdown-drain", drain.String())
	cmd.Env = append(os.Environ(), "MEMORY_LIMIT="+memoryLimit)
	must(0, cmd.Start())
	defer func() { _ = cmd.Process.Kill() }()
	fmt.Printf("webhook    pid %d, MEMORY_LIMIT=%s as the Deployment's limits.memory\n", cmd.Process.Pid, memoryLimit)

	address := "127.0.0.1:" + strconv.Itoa(port)
	url := "https://" + address + "/mutate-mpijob"
	ready := func() bool {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(probe) + "/readyz")
		return err == nil && resp.Body.Close() == nil && resp.StatusCode == http.StatusOK
	}
	for start := time.Now(); !ready(); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			must(0, fmt.Errorf("the webhook was not ready within 30 s"))
		}
	}
	legit, big := reviews()
	tlsConfig := &tls.Config{RootCAs: ca.Pool()}
	// As the API server calls the webhook: keep-alive, timeoutSeconds 5.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	status, want, err := post(context.Background(), client, url, legit)
	if status != http.StatusOK || !strings.Contains(want, `/command","value":["/usr/sbin/sshd"`) || !strings.Contains(want, "flyte-worker-args") {
		must(0, fmt.Errorf("the Flyte review was answered %d with patch %q (%v), want 200 and sshd from flyte-worker-args", status, want, err))
	}

	// The attack, and the Flyte reviews beside it.
	ctx, stop := context.WithTimeout(context.Background(), *duration)
	defer stop()
	var attackers sync.WaitGroup
	var trickled, cut, posted, bigAllowed atomic.Int64
	for range *tricklers { // each declares 3 MiB, sends it slowly, and starts again once answered
		attackers.Go(func() {
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}}
			for ctx.Err() == nil {
				req := must(http.NewRequestWithContext(ctx, http.MethodPost, url, slowBody{ctx, &trickled}))
				req.ContentLength = 3 << 20
				req.Header.Set("Content-Type", "application/json")
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				}
				cut.Add(1)
			}
		})
	}
	for range *posters {
		attackers.Go(func() {
			for c := (&http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}); ctx.Err() == nil; posted.Add(1) {
				if status, _, _ := post(ctx, c, url, big); status == http.StatusOK {
					bigAllowed.Add(1)
				}
			}
		})
	}
	attackers.Go(func() { // the kubelet swaps in a renewed Secret
		for range time.Tick(*rotateEvery) {
			if ctx.Err() != nil {
				return
			}
			cert, start := must(ca.Issue(time.Hour)), time.Now()
			must(0, fixtures.Mount(certDir, cert))
			serial := cert.Cert.SerialNumber.String()
			for servedSerial(address) != serial && time.Since(start) < 15*time.Second {
				time.Sleep(10 * time.Millisecond)
			}
			fmt.Printf("rotation   new certificate served %s after it was written\n", time.Since(start).Round(time.Millisecond))
			check(servedSerial(address) == serial, "certificate %s not served 15 s after it was written", serial)
		}
	})
	latencies, correct, _ := flyteReviews(ctx, client, url, legit, want, nil)
	attackers.Wait()
	peak := hwmMiB(cmd.Process.Pid)
	slices.Sort(latencies)
	p99 := latencies[len(latencies)*99/100]
	share := float64(correct) / float64(len(latencies))
	fmt.Printf("attack     %d tricklers wrote %d MiB in %d requests; %d posters sent %d reviews of %d bytes, %d were answered 200\n",
		*tricklers, trickled.Load()>>20, cut.Load(), *posters, posted.Load(), *bigBytes, bigAllowed.Load())
	fmt.Printf("flyte      %d reviews at %d/s: %d correct (%.2f%%); p50 %s, p99 %s, max %s\n", len(latencies), *rate, correct,
		100*share, latencies[len(latencies)/2].Round(time.Microsecond), p99.Round(time.Microsecond), latencies[len(latencies)-1].Round(time.Millisecond))
	fmt.Printf("memory     peak resident (VmHWM) %.1f MiB\n", peak)
	check(peak <= *maxRSS, "peak resident memory %.1f MiB, above %.0f MiB", peak, *maxRSS)
	check(share >= *minCorrect, "%.2f%% of the Flyte reviews answered correctly, below %.2f%%", 100*share, 100**minCorrect)
	check(p99 <= *maxP99, "p99 %s, above %s", p99, *maxP99)

	// A rollout: SIGTERM under the Flyte reviews, on new connections, as the
	// API server sends them once the drain's first answers closed its own.
	sigterm := time.Now()
	check(cmd.Process.Signal(syscall.SIGTERM) == nil, "the webhook died under the attack")
	unready := make(chan time.Duration, 1)
	go func() { // a kubelet's probe, only more often
		for ready() {
			time.Sleep(time.Millisecond)
		}
		unready <- time.Since(sigterm)
	}()
	drainCtx, closed := context.WithCancel(context.Background())
	var closedAfter time.Duration
	_, answered, wrong := flyteReviews(drainCtx, &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}}, url, legit, want, func() {
		if drainCtx.Err() == nil {
			closedAfter = time.Since(sigterm)
			closed()
		}
	})
	exit := cmd.Wait()
	unreadyAfter := <-unready
	fmt.Printf("drain      unready %s after SIGTERM, listener closed after %s; %d reviews answered correctly after SIGTERM, %d not %v; exit: %v\n",
		unreadyAfter.Round(time.Millisecond), closedAfter.Round(time.Millisecond), answered, len(wrong), wrong, exit)
	check(exit == nil && len(wrong) == 0 && answered > 0 && unreadyAfter < closedAfter,
		"drain: want every review answered until the listener closed, unready before it, exit 0")
}

// flyteReviews posts review at -rate until ctx ends, and returns the
// latencies, how many were answered 200 with want, and what the others got.
// A request never written, its connection refused or reset before the TLS
// handshake because the listener closed, is counted in neither: it calls refused.
func flyteReviews(ctx context.Context, client *http.Client, url string, review []byte, want string, refused func()) (latencies []time.Duration, correct int, wrong []string) {
	mu, wg := sync.Mutex{}, sync.WaitGroup{}
	for tick := time.Tick(time.Second / time.Duration(*rate)); ctx.Err() == nil; <-tick {
		wg.Go(func() {
			var wrote atomic.Bool
			trace := &httptrace.ClientTrace{WroteRequest: func(w httptrace.WroteRequestInfo) { wrote.Store(w.Err == nil) }}
			start := time.Now()
			status, patch, err := post(httptrace.WithClientTrace(context.Background(), trace), client, url, review)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && refused != nil && !wrote.Load():
				refused()
				return
			case status == http.StatusOK && patch == want:
				correct++
			default:
				wrong = append(wrong, fmt.Sprintf("%d %v", status, err))
			}
			latencies = append(latencies, time.Since(start))
		})
	}
	wg.Wait()
	return latencies, correct, wrong
}

// post sends body and returns the status and, for an allowed review, its patch.
func post(ctx context.Context, client *http.Client, url string, body []byte) (int, string, error) {
	req := must(http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || review.Response == nil || !review.Response.Allowed {
		return resp.StatusCode, "", err
	}
	return resp.StatusCode, string(review.Response.Patch), nil
}

// slowBody is a body that arrives at -trickle-rate until ctx ends.
type slowBody struct {
	ctx  context.Context
	sent *atomic.Int64
}

func (b slowBody) Read(p []byte) (int, error) {
	time.Sleep(time.Second / 8)
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	n := min(len(p), *trickleRate/8)
	b.sent.Add(int64(n))
	return n, nil
}

// reviews returns a Flyte review: the MPIJob Flyte builds for a Horovod task
// that declares its worker command; and a large one, the same with an
// annotation that brings it to -big-bytes, as a large last-applied-configuration does.
func reviews() (legit, big []byte) {
	job := must(fixtures.FlyteJob("v1", fixtures.HorovodWorkerCommand))
	legit = fixtures.Review(fixtures.MustJSON(job), fixtures.MPIJob("v1"), admissionv1.Create)
	job.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", *bigBytes-len(legit)-60)})
	return legit, fixtures.Review(fixtures.MustJSON(job), fixtures.MPIJob("v1"), admissionv1.Create)
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

// hwmMiB returns the peak resident memory (VmHWM) of process pid, in MiB.
func hwmMiB(pid int) (mib float64) {
	_, hwm, _ := strings.Cut(string(must(os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)))), "VmHWM:")
	_, _ = fmt.Sscanf(hwm, "%f", &mib) // kB
	return mib / 1024
}

// deploymentMemoryLimit returns the limits.memory of config/manager/manager.yaml, its one container's.
func deploymentMemoryLimit() string {
	b := must(os.ReadFile(must(fixtures.Path("config", "manager", "manager.yaml"))))
	_, limits, _ := strings.Cut(string(b), "limits:")
	_, memory, _ := strings.Cut(limits, "memory:")
	return strings.Fields(memory)[0]
}

func freePort() int {
	l := must(net.Listen("tcp", "127.0.0.1:0"))
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
