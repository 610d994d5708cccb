// Package bench_test measures, for docs/PERFORMANCE.md, what the webhook
// costs where users feel it: MPIJob creation through a real API server
// (envtest), and the server over TLS under load (vegeta), each against
// references measured alternately in the same run. `make bench` runs it
// after BenchmarkAdmit, and prints benchstat's table of that and the table
// this suite writes to $BENCH_TABLE.
package bench_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gmeasure"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flyteorg/flyte-mpi-webhook/internal/admission"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/bench/refhook"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

func TestBench(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Benchmarks")
}

// rows are the table's lines, tab-separated, in the order the specs add them.
var rows strings.Builder

// target bounds a figure's ratio to its reference's: at most atMost, or
// at least atLeast (a throughput); the zero target bounds nothing.
type target struct{ atMost, atLeast float64 }

// addRow adds a figure, ours against reference, with its target if any.
func addRow(name string, ours, reference float64, format func(float64) string, t target) {
	ratio := ours / reference
	fmt.Fprintf(&rows, "%s\t%s\t%s\t%.2f×", name, format(ours), format(reference), ratio)
	switch {
	case t.atMost > 0:
		fmt.Fprintf(&rows, "\t≤ %.2f×\t%s", t.atMost, yesNo(ratio <= t.atMost))
	case t.atLeast > 0:
		fmt.Fprintf(&rows, "\t≥ %.2f×\t%s", t.atLeast, yesNo(ratio >= t.atLeast))
	}
	rows.WriteString("\n")
}

func yesNo(met bool) string { return map[bool]string{true: "yes", false: "no"}[met] }

var _ = AfterSuite(func() {
	out := io.Writer(GinkgoWriter)
	if path := os.Getenv("BENCH_TABLE"); path != "" {
		f, err := os.Create(path)
		Expect(err).NotTo(HaveOccurred())
		defer f.Close()
		out = f
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "BENCHMARK\tOURS\tREFERENCE\tRATIO\tTARGET\tMET\n"+rows.String())
	Expect(tw.Flush()).To(Succeed())
})

// duration formats ns nanoseconds to 3 significant digits.
func duration(ns float64) string {
	return time.Duration(ns).Round(time.Duration(math.Pow(10, math.Floor(math.Log10(ns))-2))).String()
}

func median(values []float64) float64 { return slices.Sorted(slices.Values(values))[len(values)/2] }

// percentile is the p-th percentile of ds, in nanoseconds: the nearest rank.
func percentile(ds []time.Duration, p float64) float64 {
	sorted := slices.Sorted(slices.Values(ds))
	return float64(sorted[max(0, int(float64(len(sorted))*p/100+0.5)-1)])
}

// Creates per arm and MPIJob version, after warmUp unmeasured ones;
// BENCH_CREATES sets creates, for a short run that checks the suite.
var creates, warmUp = cmp.Or(atoi(os.Getenv("BENCH_CREATES")), 3000), 100

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// arm is where one side of the comparison creates its jobs, whether they
// come back mutated, and where its reference webhook says how many reviews
// it was sent ("": no reference).
type arm struct {
	name, namespace string
	mutated         bool
	calls           string
}

// policyArm creates its jobs with policyLabel, which config/policy-only's
// admission policies alone answer (installPolicy).
const policyArm, policyLabel = "policy", "test.mpi.flyte.org/bench-policy"

var _ = Describe("MPIJob creation through the API server", func() {
	for _, version := range []string{"v1", "v2beta1"} {
		It("takes, for "+version+" jobs, with the webhook, with each reference and with none", func(ctx SpecContext) {
			env, err := framework.Start(ctx, version)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(env.Stop)
			arms := serveArms(ctx, env)
			for _, a := range arms {
				Eventually(func(g Gomega) { create(ctx, g, env, a, client.DryRunAll) }).WithContext(ctx).Should(Succeed())
			}
			sent := map[string]int{}
			for _, a := range arms {
				sent[a.name] = calls(a)
			}
			e := gmeasure.NewExperiment("API server " + version)
			AddReportEntry(e.Name, e)
			e.Sample(func(i int) { // each arm first, second, ... in turn, and after each other arm
				for j := range arms {
					a := arms[(i+j)%len(arms)]
					if i%2 == 1 {
						a = arms[(i+len(arms)-j)%len(arms)]
					}
					e.RecordDuration(a.name, create(ctx, Default, env, a))
				}
			}, gmeasure.SamplingConfig{N: warmUp + creates})
			for _, a := range arms { // the API server called each reference once a create
				Expect(calls(a)-sent[a.name]).To(Equal(map[bool]int{true: warmUp + creates}[a.calls != ""]), a.name)
			}
			for _, p := range []float64{50, 99} {
				at := func(name string) float64 { return percentile(e.Get(name).Durations[warmUp:], p) }
				for _, a := range arms[1:] { // ours, and the control, against each reference
					if a.name == policyArm {
						continue // below
					}
					ours := map[bool]string{true: arms[0].name, false: arms[1].name}[a.namespace != "bench-control"]
					addRow(fmt.Sprintf("API server %s: create p%.0f, %s vs %s", version, p, ours, a.name), at(ours), at(a.name),
						duration, referenceTargets[a.name+fmt.Sprintf(" p%.0f", p)])
				}
				// internal/server's own cost: the same fixed patch, served by it and by net/http alone.
				addRow(fmt.Sprintf("API server %s: create p%.0f, %s vs %s", version, p, arms[1].name, plainArm), at(arms[1].name), at(plainArm), duration, target{})
				// The policy, which the API server runs itself, against no webhook and against the webhook.
				addRow(fmt.Sprintf("API server %s: create p%.0f, policy vs no webhook", version, p), at(policyArm), at("no webhook"), duration, target{})
				addRow(fmt.Sprintf("API server %s: create p%.0f, webhook vs policy", version, p), at(arms[0].name), at(policyArm), duration, target{})
			}
		}, NodeTimeout(15*time.Minute))
	}
})

// serveArms serves the webhook and the reference webhooks, each in a
// process of its own and for its own namespace, and returns the arms: the
// webhook's, the references', and none's, the namespace the webhook's
// namespaceSelector excludes. The webhook is bin/webhook, as a Pod runs it:
// its default flags (but its ports, free ones on loopback), its log, a JSON
// line a decision, written to a file, where a Pod's standard output goes.
func serveArms(ctx context.Context, env *framework.Env) []arm {
	excluded := slices.DeleteFunc(env.ExcludedNamespaces(), func(ns string) bool { return ns == metav1.NamespaceSystem })
	Expect(excluded).NotTo(BeEmpty())
	// The control is a second fixed-patch webhook: what differs between two
	// identical arms, the noise, in this run.
	arms := []arm{{"webhook", "bench", true, ""}, {"fixed-patch webhook", "bench-patch", true, "-"},
		{"no-op webhook", "bench-noop", false, "-"}, {"no webhook", excluded[0], false, ""},
		{"control", "bench-control", true, "-"}, {policyArm, "bench-policy", true, ""},
		{plainArm, "bench-plain", true, "-"}}
	served := []string{"bench", "bench-patch", "bench-noop", "bench-control", "bench-plain"}
	var installed admissionregistrationv1.MutatingWebhookConfigurationList
	Expect(env.Client.List(ctx, &installed)).To(Succeed())
	for _, hook := range installed.Items { // leave the served namespaces to their processes
		for i := range hook.Webhooks {
			selector := hook.Webhooks[i].NamespaceSelector
			selector.MatchExpressions = append(selector.MatchExpressions, metav1.LabelSelectorRequirement{
				Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: served})
		}
		Expect(env.Client.Update(ctx, &hook)).To(Succeed())
	}
	installPolicy(ctx, env)
	dir := GinkgoT().TempDir()
	patch := filepath.Join(dir, "patch.json")
	Expect(os.WriteFile(patch, webhookPatch(env), 0o600)).To(Succeed())
	for i := range arms {
		a := &arms[i]
		// The no-webhook arm's namespace, the install's, holds the policy's parameter already.
		Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.namespace}}))).To(Succeed())
		if !slices.Contains(served, a.namespace) {
			continue
		}
		binary, args := "webhook", []string{"--cert-dir=" + env.ServingCertDir()}
		if a.calls != "" {
			callsPort := freePort()
			binary, a.calls = "reference-webhook", fmt.Sprintf("http://127.0.0.1:%d/calls", callsPort)
			args = append(args, "--calls-address=127.0.0.1:"+strconv.Itoa(callsPort))
			if a.mutated {
				args = append(args, "--patch="+patch)
			}
		}
		if a.name == plainArm {
			args = append(args, "--plain")
		} else {
			args = append(args, "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(freePort()),
				"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(freePort()))
		}
		port := freePort()
		start(dir, a.namespace, binary, port, args...)
		Expect(env.InstallCopy(ctx, a.namespace, fmt.Sprintf("https://127.0.0.1:%d%s", port, admission.Path), func(w *admissionregistrationv1.MutatingWebhook) {
			w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: a.namespace}}
		})).To(Succeed())
	}
	return arms
}

func freePort() int {
	port, err := framework.FreePort("127.0.0.1")
	Expect(err).NotTo(HaveOccurred())
	return port
}

// start runs bin/BINARY, built by `make bench`, serving on port with args,
// its standard output and error written to dir/name.log as a Pod's are to
// its log, until the spec ends; it returns once the process serves TLS.
func start(dir, name, binary string, port int, args ...string) {
	log, err := os.Create(filepath.Join(dir, name+".log"))
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(filepath.Join("..", "..", "bin", binary), append([]string{"--port=" + strconv.Itoa(port)}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = log.Close() })
	Eventually(func() error { // a busy machine starts it slowly
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true}) // only that TLS is served
		if err == nil {
			_ = conn.Close()
		}
		return err
	}).WithTimeout(30*time.Second).Should(Succeed(), "%s serving on %d: %s", binary, port, filepath.Join(dir, name+".log"))
}

// calls is how many reviews a's reference webhook was sent; 0 for an arm with none.
func calls(a arm) int {
	if a.calls == "" {
		return 0
	}
	resp, err := http.Get(a.calls)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	n, err := strconv.Atoi(string(body))
	Expect(err).NotTo(HaveOccurred(), a.calls)
	return n
}

// referenceTargets bound the webhook's creates to a reference's, by its name and percentile: the
// same patch served by internal/server, and by net/http alone (at p50, what a new user would write).
var referenceTargets = map[string]target{"fixed-patch webhook p50": {atMost: 1.10}, "fixed-patch webhook p99": {atMost: 1.10},
	plainArm + " p50": {atMost: 1.05}}

// plainArm is the fixed-patch webhook served by net/http alone over TLS
// (reference-webhook --plain), as a new user would write one: what
// internal/server costs shows beside it.
const plainArm = "plain fixed-patch webhook"

// installPolicy installs config/policy-only, as rendered, for the jobs
// labelled policyLabel, which every webhook configuration installed before
// leaves alone.
func installPolicy(ctx context.Context, env *framework.Env) {
	root, err := fixtures.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	m, err := manifests.Render(filepath.Join(root, "config", "policy-only"), "")
	Expect(err).NotTo(HaveOccurred())
	Expect(env.LeaveLabelled(ctx, policyLabel)).To(Succeed())
	Expect(env.InstallPolicies(ctx, m, policyLabel)).To(Succeed())
}

// webhookPatch is the patch the webhook answers refhook.Job with.
func webhookPatch(env *framework.Env) []byte {
	job, err := refhook.Job(env.Version)
	Expect(err).NotTo(HaveOccurred())
	req := httptest.NewRequest(http.MethodPost, admission.Path,
		bytes.NewReader(fixtures.Review(fixtures.MustJSON(job), fixtures.MPIJob(env.Version), admissionv1.Create)))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	admission.NewHandler(mutate.DefaultOptions(), admission.DefaultLimits(), nil).ServeHTTP(rec, req)
	var answer admissionv1.AdmissionReview
	Expect(json.Unmarshal(rec.Body.Bytes(), &answer)).To(Succeed(), rec.Body.String())
	Expect(answer.Response.Patch).NotTo(BeEmpty())
	return answer.Response.Patch
}

// create creates refhook.Job in a's namespace, checks that it comes back
// mutated or not as a says, and returns how long the API call took.
func create(ctx context.Context, g Gomega, env *framework.Env, a arm, opts ...client.CreateOption) time.Duration {
	job, err := refhook.Job(env.Version)
	g.Expect(err).NotTo(HaveOccurred())
	job.SetNamespace(a.namespace)
	if a.name == policyArm {
		labels := job.GetLabels()
		labels[policyLabel] = "true"
		job.SetLabels(labels)
	}
	job.SetName("")
	job.SetGenerateName("bench-")
	start := time.Now()
	err = env.Client.Create(ctx, job, opts...)
	elapsed := time.Since(start)
	g.Expect(err).NotTo(HaveOccurred())
	_, mutated := job.GetAnnotations()[mutate.AnnotationWorkerCommandSource]
	g.Expect(mutated).To(Equal(a.mutated), a.name)
	return elapsed
}

// attack is one vegeta attack on a server: part of `vegeta report -type=json`,
// and the CPU seconds and resident memory the server's metrics give after it.
type attack struct {
	Latencies struct {
		P50 float64 `json:"50th"`
		P99 float64 `json:"99th"`
	}
	Requests, Throughput float64
	Errors               []string
	cpu, rss             float64
}

var _ = Describe("The webhook over TLS", func() {
	It("answers the load the no-op answers, without an error", func() {
		dir := GinkgoT().TempDir()
		ca, err := fixtures.WriteServingCert(dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(dir, "ca.crt"), ca.CertPEM, 0o600)).To(Succeed())
		servers := []string{"webhook", "noop-webhook"}
		attackers := map[string]func(args ...string) attack{servers[0]: serve(dir, servers[0], "webhook"),
			servers[1]: serve(dir, servers[1], "reference-webhook")}
		attacks := map[string][]attack{}
		for round := range 3 { // each server first in turn
			for i := range servers {
				name := servers[(round+i)%2]
				attacks[name] = append(attacks[name], attackers[name]("-rate=1000", "-duration=10s"))
				attacks[name+"16"] = append(attacks[name+"16"], attackers[name]("-rate=0", "-max-workers=16", "-duration=3s"))
			}
		}
		compare := func(name, load string, figure func(attack) float64, format func(float64) string, t target) {
			var ours, noop []float64
			for i := range attacks["webhook"+load] {
				ours, noop = append(ours, figure(attacks["webhook"+load][i])), append(noop, figure(attacks["noop-webhook"+load][i]))
			}
			addRow("TLS: "+name, median(ours), median(noop), format, t)
		}
		compare("p50 at 1000/s", "", func(a attack) float64 { return a.Latencies.P50 }, duration, target{})
		compare("p99 at 1000/s", "", func(a attack) float64 { return a.Latencies.P99 }, duration, target{})
		compare("CPU per request at 1000/s", "", func(a attack) float64 { return a.cpu / a.Requests * 1e9 }, duration, target{})
		compare("RSS after 1000/s", "", func(a attack) float64 { return a.rss }, func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }, target{})
		compare("throughput, 16 workers", "16", func(a attack) float64 { return a.Throughput }, func(v float64) string { return fmt.Sprintf("%.0f/s", v) }, target{atLeast: 0.75})
	})
})

// maxConnections bounds vegeta's connections to a server, well within what
// the server holds from one address: the bench measures a review's cost.
const maxConnections = 64

// serve starts bin/BINARY, built by `make bench`, serving the certificate in
// dir and logging to dir/NAME.log. Once it serves, it returns a function
// that attacks it with vegeta's args, as the API server calls a webhook
// (HTTP/1.1, keep-alive), with the review of refhook.Job, on at most
// maxConnections: when the machine stalls the server, vegeta opens one for
// each request it cannot send, past what the server holds from one address
// (conns.Limits.MaxConns), which it then resets (make soak's part, not this).
func serve(dir, name, binary string) func(args ...string) attack {
	port, metricsPort := freePort(), freePort()
	start(dir, name, binary, port, "--cert-dir="+dir, "--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort), "--health-probe-bind-address=0")

	job, err := refhook.Job("v1")
	Expect(err).NotTo(HaveOccurred())
	target, err := json.Marshal(map[string]any{"method": http.MethodPost, "url": fmt.Sprintf("https://127.0.0.1:%d%s", port, admission.Path),
		"body": fixtures.Review(fixtures.MustJSON(job), fixtures.MPIJob("v1"), admissionv1.Create), "header": http.Header{"Content-Type": {"application/json"}}})
	Expect(err).NotTo(HaveOccurred())
	targets, results, metrics := filepath.Join(dir, name+".targets"), filepath.Join(dir, name+".bin"), fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	Expect(os.WriteFile(targets, append(target, '\n'), 0o600)).To(Succeed())                                  // one target a line
	Eventually(func(g Gomega) { processMetrics(g, metrics) }).WithTimeout(30 * time.Second).Should(Succeed()) // a busy machine starts it slowly
	return func(args ...string) attack {
		cpu, _ := processMetrics(Default, metrics)
		vegeta(append([]string{"attack", "-format=json", "-targets=" + targets, "-root-certs=" + filepath.Join(dir, "ca.crt"),
			"-http2=false", "-max-connections=" + strconv.Itoa(maxConnections), "-output=" + results}, args...)...)
		var a attack
		Expect(json.Unmarshal(vegeta("report", "-type=json", results), &a)).To(Succeed())
		Expect(a.Errors).To(BeEmpty(), name)
		after, rss := processMetrics(Default, metrics)
		a.cpu, a.rss = after-cpu, rss
		return a
	}
}

// vegeta runs $VEGETA, which `make bench` sets, or bin/vegeta.
func vegeta(args ...string) []byte {
	var stderr strings.Builder
	cmd := exec.Command(cmp.Or(os.Getenv("VEGETA"), filepath.Join("..", "..", "bin", "vegeta")), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "vegeta %s: %s", strings.Join(args, " "), stderr.String())
	return out
}

// processMetrics reads the process's CPU seconds and resident memory from
// the metrics controller-runtime serves.
func processMetrics(g Gomega, url string) (cpu, rss float64) {
	resp, err := http.Get(url)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	for scanner := bufio.NewScanner(resp.Body); scanner.Scan(); {
		switch name, value, _ := strings.Cut(scanner.Text(), " "); name {
		case "process_cpu_seconds_total":
			cpu, _ = strconv.ParseFloat(value, 64)
		case "process_resident_memory_bytes":
			rss, _ = strconv.ParseFloat(value, 64)
		}
	}
	g.Expect([]float64{cpu, rss}).To(HaveEach(BeNumerically(">", 0)), "%s: process_cpu_seconds_total, process_resident_memory_bytes", url)
	return cpu, rss
}
