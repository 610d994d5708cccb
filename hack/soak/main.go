// Command soak runs named attacks (docs/RELIABILITY.md, "Attacks") against
// bin/webhook on loopback, each against a fresh process confined as its
// Deployment confines it, while Flyte reviews arrive beside the attack; it
// prints one row per attack and exits 1 when a target is missed.
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
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

var (
	binary     = flag.String("webhook", "bin/webhook", "the webhook binary")
	only       = flag.String("scenarios", "", "comma-separated scenarios to run (default: all of "+names()+")")
	duration   = flag.Duration("duration", 20*time.Second, "how long each attack lasts")
	rate       = flag.Int("rate", 25, "Flyte reviews per second beside the attack")
	cpu        = flag.Int("cpu", 0, "the one core the webhook runs on; the soak itself runs on the others")
	nofile     = flag.Uint64("nofile", 1024, "the webhook's open-file limit (RLIMIT_NOFILE)")
	gomaxprocs = flag.Int("gomaxprocs", 2, "the webhook's GOMAXPROCS: what Go picks in the Deployment's pod, its limits.cpu (500m) rounded up and at least 2; 0 leaves it to the core it is pinned to (1)")
	probeEvery = flag.Duration("probe-every", 500*time.Millisecond, "how often /healthz and /readyz are probed")
	servingKey = flag.String("serving-key", "ecdsa", "the serving certificate's key: ecdsa (P-256, as config/certmanager's Certificate) or rsa (2048)")
	oomKill    = flag.Bool("oom-kill", true, "kill the webhook, as the kernel would, once its resident memory passes the Deployment's limits.memory")
	logDir     = flag.String("logs", "", "directory to write each scenario's webhook log to (default: counted, not kept)")

	maxRSS         = flag.Float64("max-rss-mib", 100, "target: peak resident memory (VmHWM) in MiB")
	minCorrect     = flag.Float64("min-correct", 0.99, "target: share of Flyte reviews answered 200 with the expected patch")
	maxP99         = flag.Duration("max-p99", time.Second, "target: 99th percentile latency of the Flyte reviews")
	maxLogRate     = flag.Float64("max-log-rate", 1e6, "target: bytes of log a second")
	probeTimeout   = flag.Duration("probe-timeout", time.Second, "target: probes answered within this (the kubelet's timeoutSeconds)")
	maxProbeFailed = flag.Int("max-probe-failures", 0, "target: probes not answered 200 within -probe-timeout")
)

// scenario is one attack: it runs until ctx ends, and says what it did.
type scenario struct {
	name   string
	attack func(ctx context.Context, w *webhook) string
	// drain, when set, SIGTERMs the webhook after the attack and checks the drain.
	drain bool
}

var scenarios = []scenario{
	{name: "classic", attack: classic, drain: true},
	{name: "partial-hello", attack: partialHello},
	{name: "silent-conns", attack: silentConns},
	{name: "many-containers", attack: manyContainers},
	{name: "huge-containers", attack: hugeContainers},
	{name: "escaped-args", attack: escapedArgs},
	{name: "header-flood", attack: headerFlood},
	{name: "control-bytes", attack: controlBytes},
	{name: "handshake-flood", attack: handshakeFlood},
}

// result is what one scenario measured, and the targets it missed.
type result struct {
	name               string
	hwmMiB             float64
	correct, total     int
	p50, p99           time.Duration
	logRate, linesRate float64
	// healthz and readyz are the probes of each path not answered 200 in time, of rounds.
	healthz, readyz, rounds int
	died                    string
	missed                  []string
	// load is the machine's load average over the last minute, other developers' work included.
	load string
}

// check records a missed target unless ok.
func (r *result) check(ok bool, format string, args ...any) {
	if !ok {
		r.missed = append(r.missed, fmt.Sprintf(format, args...))
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
	selected := scenarios
	if *only != "" {
		selected = nil
		for name := range strings.SplitSeq(*only, ",") {
			i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
			if i < 0 {
				must(0, fmt.Errorf("-scenarios: no scenario %q; there are %s", name, names()))
			}
			selected = append(selected, scenarios[i])
		}
	}
	if *servingKey != "ecdsa" && *servingKey != "rsa" {
		must(0, fmt.Errorf("-serving-key=%s: want ecdsa or rsa", *servingKey))
	}
	must(0, runAwayFrom(*cpu))
	fmt.Printf("soak: %d scenarios of %s, %d Flyte reviews/s; webhook on core %d, GOMAXPROCS %d, RLIMIT_NOFILE %d, %s key; load average %s\n",
		len(selected), *duration, *rate, *cpu, *gomaxprocs, *nofile, *servingKey, loadAverage())
	var results []result
	for _, s := range selected {
		results = append(results, run(s))
	}
	if !report(results) {
		os.Exit(1)
	}
}

func names() string {
	var n []string
	for _, s := range scenarios {
		n = append(n, s.name)
	}
	return strings.Join(n, ",")
}

// run starts a webhook, runs s's attack beside the Flyte reviews and the
// probes, and measures the targets.
func run(s scenario) result {
	w := startWebhook(s.name)
	defer w.kill()
	legit := flyteReview()
	status, want, _, err := postAsAPIServer(context.Background(), w.client(), w.url, legit)
	if status != http.StatusOK || !strings.Contains(want, `/command","value":["/usr/sbin/sshd"`) {
		must(0, fmt.Errorf("the Flyte review was answered %d with patch %q (%v), want 200 and sshd", status, want, err))
	}

	ctx, stop := context.WithTimeout(context.Background(), *duration)
	defer stop()
	start, logStart, linesStart := time.Now(), w.logs.bytes.Load(), w.logs.lines.Load()
	webhookRan, webhookWaited := schedstat(w.cmd.Process.Pid)
	soakRan, soakWaited := schedstat(os.Getpid())
	var summary string
	r := result{name: s.name}
	var background sync.WaitGroup
	background.Go(func() { summary = s.attack(ctx, w) })
	background.Go(func() { r.healthz, r.readyz, r.rounds = probe(ctx, w.probe) })
	latencies, correct, wrong, retried := flyteReviews(ctx, w.client(), w.url, legit, want, nil)
	background.Wait()
	elapsed := time.Since(start).Seconds()
	cpu := func(pid int, ran0, waited0 time.Duration) string {
		ran, waited := schedstat(pid)
		if ran < ran0 {
			return "exited"
		}
		return fmt.Sprintf("ran %.0f%%, waited for a core %.0f%%", 100*(ran-ran0).Seconds()/elapsed, 100*(waited-waited0).Seconds()/elapsed)
	}
	webhookCPU, soakCPU := cpu(w.cmd.Process.Pid, webhookRan, webhookWaited), cpu(os.Getpid(), soakRan, soakWaited)
	r.logRate = float64(w.logs.bytes.Load()-logStart) / elapsed
	r.linesRate = float64(w.logs.lines.Load()-linesStart) / elapsed
	r.hwmMiB, r.load = float64(w.hwmKiB.Load())/1024, loadAverage()
	slices.Sort(latencies)
	r.correct, r.total = correct, len(latencies)
	if r.total > 0 {
		r.p50, r.p99 = latencies[r.total/2], latencies[r.total*99/100]
	}
	fmt.Printf("%-16s attack: %s\n", s.name, summary)
	// Other processes on the machine take the cores too: when the soak waits
	// for one, it sends fewer reviews than are due and its own delays count
	// in their latencies; when the webhook waits, its answers are late.
	fmt.Printf("%-16s flyte: %d sent of %d due, %d not answered correctly %v, %d posted again after a Retry-After\n", s.name, len(latencies),
		int(duration.Seconds())**rate, len(wrong), count(wrong), retried)
	fmt.Printf("%-16s CPU (%% of the time, over threads): the webhook %s; the soak %s\n", s.name, webhookCPU, soakCPU)
	r.missed = w.missed

	select {
	case <-w.exited:
		r.died = w.death()
		r.check(false, "the webhook exited: %s", r.died)
	default:
	}
	r.check(r.hwmMiB <= *maxRSS, "VmHWM %.1f MiB, above %.0f MiB", r.hwmMiB, *maxRSS)
	r.check(r.total > 0 && float64(r.correct) >= *minCorrect*float64(r.total), "%d of %d Flyte reviews correct, below %.0f%%", r.correct, r.total, 100**minCorrect)
	r.check(r.p99 <= *maxP99, "p99 %s, above %s", r.p99.Round(time.Millisecond), *maxP99)
	r.check(r.logRate <= *maxLogRate, "log %.0f bytes/s, above %.0f", r.logRate, *maxLogRate)
	r.check(r.healthz+r.readyz <= *maxProbeFailed, "of %d probes each, %d of /healthz and %d of /readyz not answered 200 within %s",
		r.rounds, r.healthz, r.readyz, *probeTimeout)
	if s.drain && r.died == "" {
		r.check(drain(w, legit, want), "drain: want every review answered until the listener closed, unready before it, exit 0")
	}
	return r
}

// report prints the table and the missed targets, and says whether all were met.
func report(results []result) bool {
	fmt.Println()
	t := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "scenario\tVmHWM MiB\tcorrect/total\tp50\tp99\tlog B/s\tlog lines/s\tfailed /healthz, /readyz\tload\tverdict")
	ok := true
	for _, r := range results {
		verdict := "ok"
		if len(r.missed) > 0 {
			verdict, ok = "MISSED", false
		}
		if r.died != "" {
			verdict = "MISSED (" + strings.SplitN(r.died, ":", 2)[0] + ")"
		}
		fmt.Fprintf(t, "%s\t%.1f\t%d/%d\t%s\t%s\t%.0f\t%.0f\t%d, %d of %d\t%s\t%s\n", r.name, r.hwmMiB, r.correct, r.total,
			r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.logRate, r.linesRate, r.healthz, r.readyz, r.rounds, r.load, verdict)
	}
	t.Flush()
	for _, r := range results {
		for _, m := range r.missed {
			fmt.Printf("MISSED %s: %s\n", r.name, m)
		}
	}
	if ok {
		fmt.Println("all targets met")
	}
	return ok
}

// flyteReview returns the review of the MPIJob Flyte builds for a Horovod
// task that declares its worker command.
func flyteReview() []byte {
	return reviewOf(must(fixtures.FlyteJob("v1", fixtures.HorovodWorkerCommand)))
}

// flyteReviews posts review at -rate until ctx ends, as the API server
// does, and returns the latencies, how many were answered 200 with want,
// what the others got, and how many were posted again after a Retry-After.
// A request never written, its connection refused or reset before the TLS
// handshake because the listener closed, is counted in neither: it calls refused.
func flyteReviews(ctx context.Context, client *http.Client, url string, review []byte, want string, refused func()) (
	latencies []time.Duration, correct int, wrong []string, retried int) {
	mu, wg := sync.Mutex{}, sync.WaitGroup{}
	interval := time.Second / time.Duration(*rate)
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

// schedstat returns how long the threads of process pid have run on a core
// and waited, runnable, for one (/proc/PID/task/*/schedstat), summed; 0 once
// it has exited.
func schedstat(pid int) (ran, waited time.Duration) {
	paths, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	for _, path := range paths {
		var r, w int64
		if b, err := os.ReadFile(path); err == nil {
			_, _ = fmt.Sscan(string(b), &r, &w)
		}
		ran, waited = ran+time.Duration(r), waited+time.Duration(w)
	}
	return ran, waited
}

// webhook is a running bin/webhook, confined as its Deployment confines it.
type webhook struct {
	cmd                   *exec.Cmd
	ca                    *fixtures.Authority
	certDir, address, url string
	probe, metrics        string
	tls                   *tls.Config
	logs                  *logCounter
	hwmKiB                atomic.Int64
	oomKilled             atomic.Bool
	exited                chan struct{}
	exitErr               error
	memoryLimit           string
	// missed holds the targets of the attack itself that it missed, such as a rotation not served.
	missed []string
}

// startWebhook starts bin/webhook on loopback ports with a certificate
// mounted as the kubelet mounts a Secret, pinned to core -cpu, with the
// Deployment's MEMORY_LIMIT and RLIMIT_NOFILE -nofile, and waits until it is ready.
func startWebhook(name string) *webhook {
	dir := must(os.MkdirTemp("", "soak-"+name))
	w := &webhook{ca: must(fixtures.NewAuthority()), certDir: filepath.Join(dir, "certs"), logs: &logCounter{}, exited: make(chan struct{})}
	must(0, fixtures.Mount(w.certDir, w.issue()))
	w.address, w.probe, w.metrics = freeAddress(), freeAddress(), freeAddress()
	w.url, w.tls = "https://"+w.address+"/mutate-mpijob", &tls.Config{RootCAs: w.ca.Pool()}
	_, port, _ := net.SplitHostPort(w.address)
	w.memoryLimit = deploymentMemoryLimit()
	limit := resource.MustParse(w.memoryLimit)
	w.cmd = exec.Command("taskset", "--cpu-list", strconv.Itoa(*cpu), *binary, "--cert-dir", w.certDir, "--port", port,
		"--metrics-bind-address", w.metrics, "--health-probe-bind-address", w.probe, "--shutdown-drain", drainFor.String())
	// In bytes, as the downward API writes limits.memory with divisor 1.
	w.cmd.Env = append(os.Environ(), "MEMORY_LIMIT="+strconv.FormatInt(limit.Value(), 10))
	if *gomaxprocs > 0 {
		w.cmd.Env = append(w.cmd.Env, "GOMAXPROCS="+strconv.Itoa(*gomaxprocs))
	}
	if *logDir != "" {
		w.logs.file = must(os.Create(filepath.Join(*logDir, name+".log")))
	}
	w.cmd.Stdout, w.cmd.Stderr = w.logs, w.logs
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the soak, however it ends
	must(0, w.cmd.Start())
	must(0, unix.Prlimit(w.cmd.Process.Pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: *nofile, Max: *nofile}, nil))
	go func() {
		w.exitErr = w.cmd.Wait()
		os.RemoveAll(dir)
		if w.logs.file != nil {
			w.logs.file.Close()
		}
		close(w.exited)
	}()
	go w.watchMemory(limit.Value())
	for start := time.Now(); !w.ready(); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			must(0, fmt.Errorf("the webhook was not ready within 30 s: %s", w.death()))
		}
	}
	return w
}

// issue makes a serving certificate with a -serving-key key.
func (w *webhook) issue() *fixtures.ServingCert {
	if *servingKey == "rsa" {
		return must(w.ca.Issue(time.Hour))
	}
	return must(w.ca.IssueECDSA(time.Hour))
}

// client returns a keep-alive client that keeps up to 25 idle connections,
// as client-go's transports (the API server's) do.
func (w *webhook) client() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: w.tls, MaxIdleConnsPerHost: 25}}
}

func (w *webhook) ready() bool {
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + w.probe + "/readyz")
	return err == nil && resp.Body.Close() == nil && resp.StatusCode == http.StatusOK
}

// watchMemory records the peak resident memory (VmHWM) until the webhook
// exits, and kills it as the kernel's OOM killer would once its resident
// memory passes the container's limit: without a cgroup, RSS is the nearest
// measure of what the cgroup would charge (it leaves out socket buffers).
func (w *webhook) watchMemory(limit int64) {
	for tick := time.Tick(10 * time.Millisecond); ; <-tick {
		select {
		case <-w.exited:
			return
		default:
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.cmd.Process.Pid))
		if err != nil {
			return
		}
		w.hwmKiB.Store(statusKiB(status, "VmHWM:"))
		if *oomKill && statusKiB(status, "VmRSS:")<<10 > limit {
			w.oomKilled.Store(true)
			_ = w.cmd.Process.Kill()
			return
		}
	}
}

// statusKiB returns the value of field in /proc/PID/status, in KiB.
func statusKiB(status []byte, field string) (kib int64) {
	_, value, _ := strings.Cut(string(status), field)
	_, _ = fmt.Sscanf(value, "%d", &kib)
	return kib
}

// death says why the webhook exited.
func (w *webhook) death() string {
	select {
	case <-w.exited:
	default:
		return "still running"
	}
	if w.oomKilled.Load() {
		return "OOM-killed: resident memory above the limit " + w.memoryLimit
	}
	return fmt.Sprint(w.exitErr)
}

func (w *webhook) kill() {
	_ = w.cmd.Process.Kill()
	<-w.exited
}

// logCounter counts the bytes and lines the webhook logs, and keeps them in file if set.
type logCounter struct {
	bytes, lines atomic.Int64
	file         *os.File
}

func (c *logCounter) Write(p []byte) (int, error) {
	c.bytes.Add(int64(len(p)))
	c.lines.Add(int64(bytes.Count(p, []byte("\n"))))
	if c.file != nil {
		return c.file.Write(p)
	}
	return len(p), nil
}

// runAwayFrom pins every thread of the soak, and so every one it starts
// later, to the cores other than core, so that the attackers do not take the
// webhook's core: in a cluster they run on other nodes.
func runAwayFrom(core int) error {
	var set unix.CPUSet
	must(0, unix.SchedGetaffinity(0, &set))
	set.Clear(core)
	if set.Count() == 0 {
		return nil // one core only: share it
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, task := range tasks {
		tid, _ := strconv.Atoi(task.Name())
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("pinning the soak's thread %d: %w", tid, err)
		}
	}
	return nil
}

// loadAverage returns the machine's load average over the last minute.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if fields := strings.Fields(string(b)); len(fields) > 0 {
		return fields[0]
	}
	return "?"
}

// deploymentMemoryLimit returns the limits.memory of config/manager/manager.yaml, its one container's.
func deploymentMemoryLimit() string {
	b := must(os.ReadFile(must(fixtures.Path("config", "manager", "manager.yaml"))))
	_, limits, _ := strings.Cut(string(b), "limits:")
	_, memory, _ := strings.Cut(limits, "memory:")
	return strings.Fields(memory)[0]
}

func freeAddress() string {
	l := must(net.Listen("tcp", "127.0.0.1:0"))
	defer l.Close()
	return l.Addr().String()
}
