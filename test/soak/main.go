// Command soak runs named attacks (docs/RELIABILITY.md, "Attacks") against
// bin/webhook on loopback, each against a fresh process confined as its
// Deployment confines it, while Flyte reviews arrive beside the attack; it
// prints one row per attack and exits 1 when a target is missed.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

var (
	binary     = flag.String("webhook", "bin/webhook", "the webhook binary")
	only       = flag.String("scenarios", "", "comma-separated scenarios to run (default: all of "+names()+")")
	duration   = flag.Duration("duration", 20*time.Second, "how long each attack lasts")
	rate       = flag.Int("rate", 20, "Flyte reviews per second beside the attack, on keep-alive connections")
	newRate    = flag.Int("new-conn-rate", 5, "Flyte reviews per second beside the attack, each on a new connection, as the API server opens them after an idle timeout, a rollout or a burst")
	ways       = flag.String("ways", "other,same", "where the attacks dial from, comma-separated: other (127.0.0.2, another address than the Flyte reviews' 127.0.0.1; every target holds) or same (the Flyte reviews' own: no fairness by address tells them apart; the webhook is to stay alive and within its memory, and answer as sameTargets holds under fd-limit, silent-conns and silent-half)")
	cpu        = flag.Int("cpu", 0, "the one core the webhook runs on; the soak itself runs on the others")
	nofile     = flag.Uint64("nofile", 1024, "the webhook's open-file limit (RLIMIT_NOFILE)")
	gomaxprocs = flag.Int("gomaxprocs", 2, "the webhook's GOMAXPROCS: what Go picks in the Deployment's pod, its limits.cpu (500m) rounded up and at least 2; 0 leaves it to the core it is pinned to (1)")
	probeEvery = flag.Duration("probe-every", 500*time.Millisecond, "how often /healthz and /readyz are probed")
	servingKey = flag.String("serving-key", "ecdsa", "the serving certificate's key: ecdsa (P-256, as config/certmanager's Certificate) or rsa (2048)")
	oomKill    = flag.Bool("oom-kill", true, "kill the webhook, as the kernel would, once its resident memory passes the Deployment's limits.memory")
	logDir     = flag.String("logs", "", "directory to write each scenario's webhook log to (default: counted, not kept)")
	clientAuth = flag.Bool("client-auth", false, "run the webhook with --client-ca-name: the Flyte reviews present the API server's client certificate, the attacks none, so that theirs end at the TLS handshake")

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
	{name: "small-trickle", attack: smallTrickle},
	{name: "partial-hello", attack: partialHello},
	{name: "slow-hello", attack: slowHello},
	{name: "silent-conns", attack: silentConns},
	{name: "silent-half", attack: silentHalf},
	{name: "many-containers", attack: manyContainers},
	{name: "huge-containers", attack: hugeContainers},
	{name: "escaped-args", attack: escapedArgs},
	{name: "slow-reader", attack: slowReader},
	{name: "header-flood", attack: headerFlood},
	{name: "control-bytes", attack: controlBytes},
	{name: "handshake-flood", attack: handshakeFlood},
	{name: "fd-limit", attack: idleConns},
	{name: "idle-keepalive", attack: idleKeepAlive},
	{name: "many-labels", attack: manyLabels},
}

// result is what one scenario measured, and the targets it missed.
type result struct {
	name, way      string
	hwmMiB         float64
	correct, total int
	// newCorrect and newTotal are those of the reviews sent each on a new connection.
	newCorrect, newTotal int
	p50, p99             time.Duration
	logRate, linesRate   float64
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
	var from []string
	for way := range strings.SplitSeq(*ways, ",") {
		if way != "other" && way != "same" {
			must(0, fmt.Errorf("-ways: no way %q; there are other and same", way))
		}
		from = append(from, way)
	}
	fmt.Printf("soak: %d scenarios of %s, each way of %s, %d Flyte reviews/s on keep-alive connections and %d on new ones; "+
		"webhook on core %d, GOMAXPROCS %d, RLIMIT_NOFILE %d, %s key, client certificates required: %t; load average %s\n",
		len(selected), *duration, *ways, *rate, *newRate, *cpu, *gomaxprocs, *nofile, *servingKey, *clientAuth, loadAverage())
	var results []result
	for _, way := range from {
		attackFrom(map[string]net.IP{"other": net.IPv4(127, 0, 0, 2), "same": nil}[way])
		for _, s := range selected {
			results = append(results, run(s, way))
		}
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
func run(s scenario, way string) result {
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
	r := result{name: s.name, way: way}
	var background sync.WaitGroup
	background.Go(func() { summary = s.attack(ctx, w) })
	background.Go(func() { r.healthz, r.readyz, r.rounds = probe(ctx, w.probe) })
	var fresh struct {
		latencies []time.Duration
		correct   int
		wrong     []string
		retried   int
	}
	background.Go(func() {
		newConns := &http.Client{Transport: &http.Transport{TLSClientConfig: w.tls, DisableKeepAlives: true}}
		fresh.latencies, fresh.correct, fresh.wrong, fresh.retried = flyteReviews(ctx, newConns, w.url, legit, want, *newRate, nil)
	})
	latencies, correct, wrong, retried := flyteReviews(ctx, w.client(), w.url, legit, want, *rate, nil)
	background.Wait()
	latencies, correct, wrong, retried = append(latencies, fresh.latencies...), correct+fresh.correct, append(wrong, fresh.wrong...), retried+fresh.retried
	elapsed := time.Since(start).Seconds()
	webhookCPU, soakCPU := cpuSince(w.cmd.Process.Pid, webhookRan, webhookWaited, elapsed), cpuSince(os.Getpid(), soakRan, soakWaited, elapsed)
	r.logRate = float64(w.logs.bytes.Load()-logStart) / elapsed
	r.linesRate = float64(w.logs.lines.Load()-linesStart) / elapsed
	r.hwmMiB, r.load = float64(w.hwmKiB.Load())/1024, loadAverage()
	slices.Sort(latencies)
	r.correct, r.total = correct, len(latencies)
	r.newCorrect, r.newTotal = fresh.correct, len(fresh.latencies)
	if r.total > 0 {
		r.p50, r.p99 = latencies[r.total/2], latencies[r.total*99/100]
	}
	row := s.name + "/" + way
	fmt.Printf("%-22s attack: %s\n", row, summary)
	fmt.Printf("%-22s flyte: %d sent of %d due, %d not answered correctly %v, %d posted again after a Retry-After; correct: %d/%d kept alive, %d/%d on new connections\n", row,
		len(latencies), int(duration.Seconds())*(*rate+*newRate), len(wrong), count(wrong), retried,
		r.correct-r.newCorrect, r.total-r.newTotal, r.newCorrect, r.newTotal)
	fmt.Printf("%-22s CPU (%% of the time, over threads): the webhook %s; the soak %s\n", row, webhookCPU, soakCPU)
	r.missed = w.missed
	select {
	case <-w.exited:
		r.died = w.death()
	default:
	}
	r.checkTargets()
	if s.drain && r.died == "" {
		r.check(drain(w, legit, want), "drain: want every review answered until the listener closed, unready before it, exit 0")
	}
	return r
}

// sameTargets are what holds with the attacker on the Flyte reviews' own
// address, where no fairness by address tells them apart: the share of the
// reviews answered on kept-alive connections and on new ones, and whether
// p99 is held to -max-p99. Elsewhere the webhook is only to stay alive and
// within its memory. silent-conns' reviews on new connections are measured,
// not held: above the kernel's SYN backlog, syncookies hand the webhook the
// flood's connections before they have sent a byte.
var sameTargets = map[string]struct {
	keptAlive, fresh float64
	p99              bool
}{
	"fd-limit":       {keptAlive: 0.99, fresh: 0.99, p99: true},
	"idle-keepalive": {keptAlive: 0.99, fresh: 0.99, p99: true},
	"silent-conns":   {keptAlive: 0.99},
	"silent-half":    {keptAlive: 0.99, fresh: 0.99},
}

// checkTargets records the targets r missed.
func (r *result) checkTargets() {
	r.check(r.died == "", "the webhook exited: %s", r.died)
	r.check(r.hwmMiB <= *maxRSS, "VmHWM %.1f MiB, above %.0f MiB", r.hwmMiB, *maxRSS)
	if r.way == "same" {
		target := sameTargets[r.name]
		keptCorrect, kept := r.correct-r.newCorrect, r.total-r.newTotal
		r.check(float64(keptCorrect) >= target.keptAlive*float64(kept), "%d of %d Flyte reviews on kept-alive connections correct, below %.0f%%",
			keptCorrect, kept, 100*target.keptAlive)
		r.check(float64(r.newCorrect) >= target.fresh*float64(r.newTotal), "%d of %d Flyte reviews on new connections correct, below %.0f%%",
			r.newCorrect, r.newTotal, 100*target.fresh)
		r.check(!target.p99 || r.p99 <= *maxP99, "p99 %s, above %s", r.p99.Round(time.Millisecond), *maxP99)
		return
	}
	r.check(r.total > 0 && float64(r.correct) >= *minCorrect*float64(r.total), "%d of %d Flyte reviews correct, below %.0f%%", r.correct, r.total, 100**minCorrect)
	r.check(r.p99 <= *maxP99, "p99 %s, above %s", r.p99.Round(time.Millisecond), *maxP99)
	r.check(r.logRate <= *maxLogRate, "log %.0f bytes/s, above %.0f", r.logRate, *maxLogRate)
	r.check(r.healthz+r.readyz <= *maxProbeFailed, "of %d probes each, %d of /healthz and %d of /readyz not answered 200 within %s",
		r.rounds, r.healthz, r.readyz, *probeTimeout)
}

// cpuSince says how long the threads of process pid ran, and waited for a
// core, since they had run ran0 and waited waited0, in shares of elapsed seconds.
func cpuSince(pid int, ran0, waited0 time.Duration, elapsed float64) string {
	ran, waited := schedstat(pid)
	if ran < ran0 {
		return "exited"
	}
	return fmt.Sprintf("ran %.0f%%, waited for a core %.0f%%", 100*(ran-ran0).Seconds()/elapsed, 100*(waited-waited0).Seconds()/elapsed)
}

// report prints the table and the missed targets, and says whether all were met.
func report(results []result) bool {
	fmt.Println()
	t := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "scenario\tattacker\tVmHWM MiB\tcorrect/total\tp50\tp99\tlog B/s\tlog lines/s\tfailed /healthz, /readyz\tload\tverdict")
	ok := true
	for _, r := range results {
		verdict := "ok"
		if len(r.missed) > 0 {
			verdict, ok = "MISSED", false
		}
		if r.died != "" {
			verdict = "MISSED (" + strings.SplitN(r.died, ":", 2)[0] + ")"
		}
		fmt.Fprintf(t, "%s\t%s\t%.1f\t%d/%d\t%s\t%s\t%.0f\t%.0f\t%d, %d of %d\t%s\t%s\n", r.name, r.way, r.hwmMiB, r.correct, r.total,
			r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.logRate, r.linesRate, r.healthz, r.readyz, r.rounds, r.load, verdict)
	}
	t.Flush()
	for _, r := range results {
		for _, m := range r.missed {
			fmt.Printf("MISSED %s/%s: %s\n", r.name, r.way, m)
		}
	}
	if ok {
		fmt.Println("all targets met")
	}
	return ok
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
	runtime.GOMAXPROCS(set.Count()) // the runtime counted the cores before the pinning
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
