//go:build linux

// Command load drives the webhook over TLS on loopback with real
// AdmissionReview bodies and compares it, in the same run, with a no-op
// webhook served by the same controller-runtime server (hack/noop-webhook):
// latency at a constant rate, maximum throughput, errors and peak memory.
// It is the second benchmark of docs/PERFORMANCE.md; `make bench` runs it.
//
//	go run ./hack/load -webhook-bin bin/webhook -noop-bin bin/noop-webhook
//
// By default it starts both binaries itself, each with a certificate it
// issues into a temporary directory laid out as the kubelet mounts a Secret
// (installCertificate), and sends to 127.0.0.1 only. -webhook-url and
// -noop-url (with -webhook-pid, -noop-pid and -ca) point it at servers that
// are already running instead.
//
// Each phase (constant rate, then maximum throughput) warms both servers up,
// then runs rounds (-rounds, -max-rounds), each driving one server and then
// the other, in alternating order, so that the machine's drift falls on both
// alike. -rss-every prints the memory curve as it goes; with -compare=false,
// -rounds 1, -warmup 0, -max-duration 0 and a long -duration, it is a soak
// run of the webhook alone.
package main

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/flyteorg/flyte-mpi-webhook/hack/benchtable/table"
)

// config is the load tool's flags.
type config struct {
	WebhookBin, NoopBin string
	WebhookURL, NoopURL string
	WebhookPID, NoopPID int
	CA                  string
	Insecure            bool
	Compare             bool

	Rate        int
	Duration    time.Duration
	Rounds      int
	MaxRounds   int
	Warmup      time.Duration
	MaxDuration time.Duration
	MaxWorkers  uint64

	Bodies      []string
	Testdata    string
	RSSEvery    time.Duration
	RotateEvery time.Duration
	Rows        string
	Keep        bool
}

// The issue's targets for this benchmark.
const (
	targetP99         = 5 * time.Millisecond
	targetRSSRatio    = 1.2
	targetThroughputs = 0.9
)

func main() {
	cfg := config{}
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	fs.StringVar(&cfg.WebhookBin, "webhook-bin", "bin/webhook", "the webhook binary to start, unless -webhook-url is set")
	fs.StringVar(&cfg.NoopBin, "noop-bin", "bin/noop-webhook", "the no-op webhook binary to start, unless -noop-url is set")
	fs.StringVar(&cfg.WebhookURL, "webhook-url", "", "URL of a running webhook (https://127.0.0.1:PORT/mutate-mpijob), instead of starting one")
	fs.StringVar(&cfg.NoopURL, "noop-url", "", "URL of a running no-op webhook, instead of starting one")
	fs.IntVar(&cfg.WebhookPID, "webhook-pid", 0, "PID of the running webhook, whose memory is sampled")
	fs.IntVar(&cfg.NoopPID, "noop-pid", 0, "PID of the running no-op webhook, whose memory is sampled")
	fs.StringVar(&cfg.CA, "ca", "", "PEM file of the CA that signed the running servers' certificates")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "do not verify the running servers' certificates")
	fs.BoolVar(&cfg.Compare, "compare", true, "drive the no-op webhook too, and report the ratios")
	fs.IntVar(&cfg.Rate, "rate", 1000, "requests per second of the constant-rate phase")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long each server is driven at -rate, per round")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "rounds of the constant-rate phase; each round drives every server once")
	fs.IntVar(&cfg.MaxRounds, "max-rounds", 5, "rounds of the maximum-throughput phase")
	fs.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "unmeasured load on each server before each phase")
	fs.DurationVar(&cfg.MaxDuration, "max-duration", 3*time.Second, "how long each server is driven as fast as it answers, per round; 0 skips that phase")
	fs.Uint64Var(&cfg.MaxWorkers, "max-workers", 16, "concurrent requests of the maximum-throughput phase")
	fs.Func("body", "an AdmissionReview file to send (repeatable); default: testdata's Flyte Horovod MPIJobs, v1 and v2beta1, in turn", func(s string) error {
		cfg.Bodies = append(cfg.Bodies, s)
		return nil
	})
	fs.StringVar(&cfg.Testdata, "testdata", "testdata", "the directory of mpijob-v1.yaml and mpijob-v2beta1.yaml, for the built-in bodies")
	fs.DurationVar(&cfg.RSSEvery, "rss-every", 0, "print every server's memory at this interval (e.g. 1s); 0 prints none")
	fs.DurationVar(&cfg.RotateEvery, "rotate-every", 0, "replace the webhook's certificate at this interval, as cert-manager does, and probe it on new connections (e.g. 20s); 0 never")
	fs.StringVar(&cfg.Rows, "rows", "", "write the rows of make bench's table to this JSON file")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the temporary directory: certificates and server logs")
	_ = fs.Parse(os.Args[1:]) // ExitOnError: Parse exits on a bad flag

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// fixture is the servers under load, how to reach them, and their memory.
type fixture struct {
	// Webhook is the server under test; NoOp the reference, nil without -compare.
	Webhook, NoOp *server
	// Clients hold each server's keep-alive connections across attacks.
	Clients map[*server]*http.Client
	// Memory samples each server's memory, when its PID is known.
	Memory map[*server]*rssSampler
	// Authority issues the certificates of the servers the fixture started.
	Authority *authority
	// Dir holds their certificates and logs.
	Dir string

	stopCurve func()
}

// Servers lists the servers: the webhook first.
func (f *fixture) Servers() []*server {
	if f.NoOp == nil {
		return []*server{f.Webhook}
	}
	return []*server{f.Webhook, f.NoOp}
}

// setUp starts or finds the servers, and starts sampling their memory.
func setUp(ctx context.Context, cfg config, out io.Writer) (_ *fixture, err error) {
	f := &fixture{Clients: map[*server]*http.Client{}, Memory: map[*server]*rssSampler{}}
	defer func() {
		if err != nil {
			f.tearDown(cfg.Keep)
		}
	}()
	if f.Dir, err = os.MkdirTemp("", "flyte-mpi-webhook-load-"); err != nil {
		return f, err
	}
	pool := x509.NewCertPool()
	if cfg.CA != "" {
		pem, err := os.ReadFile(cfg.CA)
		if err != nil {
			return f, err
		}
		if !pool.AppendCertsFromPEM(pem) {
			return f, fmt.Errorf("%s: no PEM certificate", cfg.CA)
		}
	}
	if cfg.WebhookURL == "" || (cfg.Compare && cfg.NoopURL == "") {
		if f.Authority, err = newAuthority(); err != nil {
			return f, err
		}
		pool.AddCert(f.Authority.cert)
	}
	tlsConfig := clientTLS(pool, cfg.Insecure)

	start := func(name, bin, url string, pid int) (*server, error) {
		if url != "" {
			return &server{Name: name, URL: url, PID: pid}, nil
		}
		cert, err := f.Authority.issue(24 * time.Hour)
		if err != nil {
			return nil, err
		}
		certDir := filepath.Join(f.Dir, name, "certs")
		if err := installCertificate(certDir, cert); err != nil {
			return nil, err
		}
		return startServer(ctx, name, bin, certDir, filepath.Join(f.Dir, name, "log"))
	}
	if f.Webhook, err = start("webhook", cfg.WebhookBin, cfg.WebhookURL, cfg.WebhookPID); err != nil {
		return f, err
	}
	if cfg.Compare {
		if f.NoOp, err = start("no-op", cfg.NoopBin, cfg.NoopURL, cfg.NoopPID); err != nil {
			return f, err
		}
	}
	for _, s := range f.Servers() {
		f.Clients[s] = newClient(tlsConfig)
		if s.PID > 0 {
			f.Memory[s] = sampleRSS(s.PID, 100*time.Millisecond, nil)
		}
		fmt.Fprintf(out, "%-8s %s pid %d", s.Name, s.URL, s.PID)
		if s.Log != "" {
			fmt.Fprintf(out, " log %s", s.Log)
		}
		fmt.Fprintln(out)
	}
	if cfg.RSSEvery > 0 {
		f.stopCurve = f.printMemoryCurve(out, cfg.RSSEvery)
	}
	return f, nil
}

// printMemoryCurve prints every server's memory every interval, until the returned func is called.
func (f *fixture) printMemoryCurve(out io.Writer, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(stopped)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
			}
			line := fmt.Sprintf("rss t=%-6s", time.Since(start).Round(time.Second))
			for _, s := range f.Servers() {
				if s.PID == 0 {
					continue
				}
				if m, err := readMemory(s.PID); err == nil {
					line += fmt.Sprintf("  %s rss=%s hwm=%s", s.Name, mib(m.RSS), mib(m.HWM))
				}
			}
			fmt.Fprintln(out, line)
		}
	}()
	return func() { close(done); <-stopped }
}

// tearDown stops the servers the fixture started and removes its directory unless keep.
func (f *fixture) tearDown(keep bool) {
	if f.stopCurve != nil {
		f.stopCurve()
	}
	for _, m := range f.Memory {
		m.Stop()
	}
	for _, s := range []*server{f.Webhook, f.NoOp} {
		if s != nil {
			s.Stop()
		}
	}
	if f.Dir != "" && !keep {
		_ = os.RemoveAll(f.Dir)
	}
}

// phase is one kind of load, applied to every server in turn.
type phase struct {
	Name string
	Spec attackSpec
}

// measure warms every server up with p, then runs rounds rounds of p,
// alternating the order of the servers, and returns each server's rounds.
// Around each attack it reads the server's CPU time and memory.
func (f *fixture) measure(ctx context.Context, p phase, warmup time.Duration, rounds int, bodies [][]byte, out io.Writer) (map[*server][]round, error) {
	servers := f.Servers()
	for _, s := range servers {
		if warmup <= 0 {
			break // vegeta reads a zero duration as forever
		}
		warm := p.Spec
		warm.Duration = warmup
		attack(ctx, f.Clients[s], s, bodies, warm, s == f.Webhook)
	}
	results := map[*server][]round{}
	for i := range rounds {
		order := servers
		if i%2 == 1 {
			order = reversed(servers)
		}
		for _, s := range order {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r := f.attack(ctx, s, bodies, p.Spec)
			results[s] = append(results[s], r)
			fmt.Fprintf(out, "%s round %d %-8s %6d requests %8.1f/s  p50 %-9s p99 %-9s errors %d  cpu/request %-8s peak rss %s\n",
				p.Name, i+1, s.Name, r.Requests, r.Throughput, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond),
				r.Errors, r.CPUPerRequest.Round(100*time.Nanosecond), mib(r.PeakRSS))
		}
	}
	return results, nil
}

// attack is the package's attack on s, with the server's CPU time and peak memory over it.
func (f *fixture) attack(ctx context.Context, s *server, bodies [][]byte, spec attackSpec) round {
	cpuBefore, cpuErr := readCPU(s.PID)
	start := time.Now()
	r := attack(ctx, f.Clients[s], s, bodies, spec, s == f.Webhook)
	end := time.Now()
	if cpuAfter, err := readCPU(s.PID); s.PID > 0 && cpuErr == nil && err == nil && r.Requests > 0 {
		r.CPUPerRequest = (cpuAfter - cpuBefore) / time.Duration(r.Requests)
	}
	if m := f.Memory[s]; m != nil {
		r.PeakRSS = m.PeakBetween(start, end)
	}
	return r
}

func reversed(servers []*server) []*server {
	r := make([]*server, len(servers))
	for i, s := range servers {
		r[len(servers)-1-i] = s
	}
	return r
}

// run is the whole benchmark: set up, the constant-rate phase, the
// maximum-throughput phase, the report.
func run(ctx context.Context, cfg config, out io.Writer) error {
	bodies, err := readBodies(cfg.Bodies)
	if len(cfg.Bodies) == 0 {
		bodies, err = builtInBodies(cfg.Testdata)
	}
	if err != nil {
		return err
	}
	f, err := setUp(ctx, cfg, out)
	if err != nil {
		return err
	}
	defer f.tearDown(cfg.Keep)

	var rotations *rotator
	if cfg.RotateEvery > 0 {
		if f.Authority == nil || f.Webhook.CertDir == "" {
			return fmt.Errorf("-rotate-every needs a webhook that the load tool starts")
		}
		// The attack may last -warmup and -rounds times -duration; no rotation in the last half interval.
		soak := cfg.Warmup + time.Duration(cfg.Rounds)*cfg.Duration
		rotations = f.rotateEvery(ctx, cfg.RotateEvery, soak-cfg.RotateEvery/2, 100*time.Millisecond, bodies[0], out)
	}
	rate, err := f.measure(ctx, phase{Name: fmt.Sprintf("rate %d/s", cfg.Rate), Spec: attackSpec{Rate: cfg.Rate, Duration: cfg.Duration}},
		cfg.Warmup, cfg.Rounds, bodies, out)
	if err != nil {
		return err
	}
	if rotations != nil {
		if err := reportRotations(out, rotations); err != nil {
			return err
		}
	}
	var maxThroughput map[*server][]round
	if cfg.MaxDuration > 0 {
		maxPhase := phase{Name: fmt.Sprintf("max (%d concurrent)", cfg.MaxWorkers), Spec: attackSpec{Duration: cfg.MaxDuration, MaxWorkers: cfg.MaxWorkers}}
		if maxThroughput, err = f.measure(ctx, maxPhase, cfg.Warmup, cfg.MaxRounds, bodies, out); err != nil {
			return err
		}
	}
	hwm := map[*server]int64{}
	for s, m := range f.Memory {
		m.Stop()
		hwm[s] = m.Peak()
	}
	rows := report(out, cfg, f, rate, maxThroughput, hwm)
	if cfg.Rows != "" {
		return table.Write(cfg.Rows, rows)
	}
	return nil
}

// reportRotations stops the rotations and fails unless every one was served
// and no probe failed.
func reportRotations(out io.Writer, r *rotator) error {
	rotations, probes, failures := r.Stop()
	served := 0
	for _, rot := range rotations {
		if rot.Served > 0 {
			served++
		}
	}
	fmt.Fprintf(out, "\nCertificate rotations: %d written, %d served on new connections; %d probes on new connections, %d failed\n",
		len(rotations), served, probes, len(failures))
	for _, f := range failures[:min(len(failures), 5)] {
		fmt.Fprintln(out, "probe error:", f)
	}
	if len(rotations) == 0 || served < len(rotations) || len(failures) > 0 {
		return fmt.Errorf("certificate rotation: %d of %d rotations served, %d of %d probes failed",
			served, len(rotations), len(failures), probes)
	}
	return nil
}

// summary is the medians of a server's rounds of one phase, and its errors in all.
type summary struct {
	Requests, Errors int
	ErrorSamples     []string
	P50, P99, Max    time.Duration
	Throughput       float64
	PeakRSS          int64
	CPUPerRequest    time.Duration
}

// summarize takes the median of each figure over rounds: on a shared
// machine, one round that another process stalls moves a median little.
func summarize(rounds []round) summary {
	var s summary
	var p50s, p99s, cpus, throughputs, rss []float64
	for _, r := range rounds {
		s.Requests += r.Requests
		s.Errors += r.Errors
		for _, e := range r.ErrorSamples {
			if len(s.ErrorSamples) < 5 && !slices.Contains(s.ErrorSamples, e) {
				s.ErrorSamples = append(s.ErrorSamples, e)
			}
		}
		s.Max = max(s.Max, r.Max)
		p50s, p99s, cpus = append(p50s, float64(r.P50)), append(p99s, float64(r.P99)), append(cpus, float64(r.CPUPerRequest))
		throughputs, rss = append(throughputs, r.Throughput), append(rss, float64(r.PeakRSS))
	}
	s.P50, s.P99, s.CPUPerRequest = time.Duration(table.Median(p50s)), time.Duration(table.Median(p99s)), time.Duration(table.Median(cpus))
	s.Throughput, s.PeakRSS = table.Median(throughputs), int64(table.Median(rss))
	return s
}

// report prints what was measured per server and returns the rows of make
// bench's table: each figure the median of its rounds, errors the total, and
// each ratio the median of the rounds' ratios.
func report(out io.Writer, cfg config, f *fixture, rate, maxThroughput map[*server][]round, hwm map[*server]int64) []table.Row {
	fmt.Fprintf(out, "\nMedians of %d rounds at %d/s", cfg.Rounds, cfg.Rate)
	if maxThroughput != nil {
		fmt.Fprintf(out, ", and of %d rounds at maximum throughput (%d concurrent requests)", cfg.MaxRounds, cfg.MaxWorkers)
	}
	fmt.Fprintln(out, "; errors in all.")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SERVER\tREQUESTS\tP50\tP99\tMAX\tERRORS\tCPU/REQUEST\tPEAK RSS\tMAX THROUGHPUT\tERRORS\tCPU/REQUEST\tPEAK RSS\tVmHWM\n")
	rates, maxes := map[*server]summary{}, map[*server]summary{}
	for _, s := range f.Servers() {
		r := summarize(rate[s])
		rates[s] = r
		line := fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s", s.Name, r.Requests, r.P50.Round(time.Microsecond),
			r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond), r.Errors, r.CPUPerRequest.Round(100*time.Nanosecond), mib(r.PeakRSS))
		if rounds, ok := maxThroughput[s]; ok {
			m := summarize(rounds)
			maxes[s] = m
			line += fmt.Sprintf("\t%.0f/s\t%d\t%s\t%s", m.Throughput, m.Errors, m.CPUPerRequest.Round(100*time.Nanosecond), mib(m.PeakRSS))
		} else {
			line += "\t-\t-\t-\t-"
		}
		fmt.Fprintf(tw, "%s\t%s\n", line, mib(hwm[s]))
	}
	_ = tw.Flush()
	for _, s := range f.Servers() {
		for _, e := range append(rates[s].ErrorSamples, maxes[s].ErrorSamples...) {
			fmt.Fprintf(out, "%s error: %s\n", s.Name, e)
		}
	}

	w := rates[f.Webhook]
	rows := []table.Row{{
		Benchmark: fmt.Sprintf("TLS: p99 at %d/s, errors", cfg.Rate),
		Ours:      fmt.Sprintf("%s, %d", ms(w.P99), w.Errors),
		Target:    fmt.Sprintf("≤ %s, 0", ms(targetP99)),
		Met:       w.P99 <= targetP99 && w.Errors == 0,
	}}
	if f.NoOp == nil {
		return rows
	}
	n := rates[f.NoOp]
	ratio := func(phase map[*server][]round, figure func(round) float64) float64 {
		return pairedRatio(phase[f.Webhook], phase[f.NoOp], figure)
	}
	rows[0].Reference = fmt.Sprintf("%s, %d", ms(n.P99), n.Errors)
	rows[0].Ratio = table.Times(ratio(rate, func(r round) float64 { return float64(r.P99) }))
	if w.PeakRSS > 0 && n.PeakRSS > 0 {
		r := ratio(rate, func(r round) float64 { return float64(r.PeakRSS) })
		rows = append(rows, table.Row{
			Benchmark: fmt.Sprintf("TLS: peak RSS at %d/s", cfg.Rate), Ours: mib(w.PeakRSS), Reference: mib(n.PeakRSS),
			Ratio: table.Times(r), Target: fmt.Sprintf("≤ %.1f×", targetRSSRatio), Met: r <= targetRSSRatio,
		})
	}
	if maxThroughput != nil {
		mw, mn := maxes[f.Webhook], maxes[f.NoOp]
		r := ratio(maxThroughput, func(r round) float64 { return r.Throughput })
		rows = append(rows, table.Row{
			Benchmark: "TLS: max throughput", Ours: fmt.Sprintf("%.0f/s", mw.Throughput), Reference: fmt.Sprintf("%.0f/s", mn.Throughput),
			Ratio: table.Times(r), Target: fmt.Sprintf("≥ %.2f×", targetThroughputs),
			Met: r >= targetThroughputs && mw.Errors == 0,
		})
	}
	if w.CPUPerRequest > 0 && n.CPUPerRequest > 0 {
		rows = append(rows, table.Row{
			Benchmark: fmt.Sprintf("TLS: server CPU per request at %d/s", cfg.Rate),
			Ours:      w.CPUPerRequest.Round(100 * time.Nanosecond).String(), Reference: n.CPUPerRequest.Round(100 * time.Nanosecond).String(),
			Ratio:   table.Times(ratio(rate, func(r round) float64 { return float64(r.CPUPerRequest) })),
			Target:  "(context)",
			Context: true,
		})
	}
	return rows
}

// pairedRatio is the median, over rounds, of figure(webhook's round) /
// figure(no-op's round): each round drives the two servers one after the
// other, so a ratio within a round cancels the machine's drift between rounds.
func pairedRatio(webhook, noOp []round, figure func(round) float64) float64 {
	var ratios []float64
	for i := range min(len(webhook), len(noOp)) {
		if d := figure(noOp[i]); d > 0 {
			ratios = append(ratios, figure(webhook[i])/d)
		}
	}
	return table.Median(ratios)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
