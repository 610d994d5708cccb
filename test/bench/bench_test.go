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
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
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

// Creates per arm and MPIJob version, after warmUp unmeasured ones.
const creates, warmUp = 3000, 100

// arm is where one side of the comparison creates its jobs, whether they
// come back mutated, and its reference webhook's count of answers (nil: none).
type arm struct {
	name, namespace string
	mutated         bool
	calls           *atomic.Int64
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

// serveArms serves the reference webhooks, each for its own namespace, and
// returns the arms: the webhook's, the references', and none's, the
// namespace the webhook's namespaceSelector excludes.
func serveArms(ctx context.Context, env *framework.Env) []arm {
	excluded := slices.DeleteFunc(env.ExcludedNamespaces(), func(ns string) bool { return ns == metav1.NamespaceSystem })
	Expect(excluded).NotTo(BeEmpty())
	// The control is a second fixed-patch webhook: what differs between two
	// identical arms, the noise, in this run.
	arms := []arm{{"webhook", "bench", true, nil}, {"fixed-patch webhook", "bench-patch", true, &atomic.Int64{}},
		{"no-op webhook", "bench-noop", false, &atomic.Int64{}}, {"no webhook", excluded[0], false, nil},
		{"control", "bench-control", true, &atomic.Int64{}}, {policyArm, "bench-policy", true, nil},
		{plainArm, "bench-plain", true, &atomic.Int64{}}}
	var installed admissionregistrationv1.MutatingWebhookConfigurationList
	Expect(env.Client.List(ctx, &installed)).To(Succeed())
	for _, hook := range installed.Items { // leave the references' namespaces to them
		for i := range hook.Webhooks {
			selector := hook.Webhooks[i].NamespaceSelector
			selector.MatchExpressions = append(selector.MatchExpressions, metav1.LabelSelectorRequirement{
				Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"bench-patch", "bench-noop", "bench-control", "bench-plain"}})
		}
		Expect(env.Client.Update(ctx, &hook)).To(Succeed())
	}
	installPolicy(ctx, env)
	serving, stop := context.WithCancel(context.Background())
	DeferCleanup(stop)
	for _, a := range arms {
		// The no-webhook arm's namespace, the install's, holds the policy's parameter already.
		Expect(client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.namespace}}))).To(Succeed())
		if a.calls == nil {
			continue
		}
		reference := refhook.Handler(map[bool][]byte{true: webhookPatch(env)}[a.mutated])
		port, err := framework.FreePort("127.0.0.1")
		Expect(err).NotTo(HaveOccurred())
		if a.name == plainArm {
			servePlain(serving, port, env.ServingCertDir(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.calls.Add(1); reference.ServeHTTP(w, r) }))
		} else {
			mgr, err := server.New(server.Config{Host: "127.0.0.1", Port: port, CertDir: env.ServingCertDir(), MetricsBindAddress: "0", HealthProbeBindAddress: "0"}, server.DefaultLimits(), admission.Path,
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.calls.Add(1); reference.ServeHTTP(w, r) }))
			Expect(err).NotTo(HaveOccurred())
			go func() { defer GinkgoRecover(); Expect(mgr.Start(serving)).To(Succeed()) }()
		}
		Expect(env.InstallCopy(ctx, a.namespace, fmt.Sprintf("https://127.0.0.1:%d%s", port, admission.Path), func(w *admissionregistrationv1.MutatingWebhook) {
			w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: a.namespace}}
		})).To(Succeed())
	}
	return arms
}

// referenceTargets bound the webhook's creates to a reference's, by its name and percentile: the
// same patch served by internal/server, and by net/http alone (at p50, what a new user would write).
var referenceTargets = map[string]target{"fixed-patch webhook p50": {atMost: 1.10}, "fixed-patch webhook p99": {atMost: 1.10},
	plainArm + " p50": {atMost: 1.05}}

// plainArm is the fixed-patch webhook served by net/http alone over TLS,
// as a new user would write one: what internal/server costs shows beside it.
const plainArm = "plain fixed-patch webhook"

// servePlain serves handler over TLS on 127.0.0.1:port with net/http's own
// server and the certificate in certDir, until ctx ends.
func servePlain(ctx context.Context, port int, certDir string, handler http.Handler) {
	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	go func() {
		defer GinkgoRecover()
		err := srv.ServeTLS(listener, filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
		Expect(err).To(MatchError(http.ErrServerClosed))
	}()
}

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

// create creates refhook.Job in a's namespace, checks that a answered it
// (mutated or not, by its reference webhook once), and returns how long the
// API call took.
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
	calls := int64(0)
	if a.calls != nil {
		calls = a.calls.Load()
	}
	start := time.Now()
	err = env.Client.Create(ctx, job, opts...)
	elapsed := time.Since(start)
	g.Expect(err).NotTo(HaveOccurred())
	_, mutated := job.GetAnnotations()[mutate.AnnotationWorkerCommandSource]
	g.Expect(mutated).To(Equal(a.mutated), a.name)
	if a.calls != nil {
		g.Expect(a.calls.Load()-calls).To(BeEquivalentTo(1), a.name)
	}
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
		attackers := map[string]func(args ...string) attack{servers[0]: serve(dir, servers[0]), servers[1]: serve(dir, servers[1])}
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

// serve starts bin/NAME, built by `make bench`, serving the certificate in
// dir and logging to dir/NAME.log. Once it serves, it returns a function
// that attacks it with vegeta's args, as the API server calls a webhook
// (HTTP/1.1, keep-alive), with the review of refhook.Job, on at most
// maxConnections: when the machine stalls the server, vegeta opens one for
// each request it cannot send, past what the server holds from one address
// (conns.Limits.MaxConns), which it then resets (make soak's part, not this).
func serve(dir, name string) func(args ...string) attack {
	port, err := framework.FreePort("127.0.0.1")
	Expect(err).NotTo(HaveOccurred())
	metricsPort, err := framework.FreePort("127.0.0.1")
	Expect(err).NotTo(HaveOccurred())
	log, err := os.Create(filepath.Join(dir, name+".log"))
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(filepath.Join("..", "..", "bin", name), "--cert-dir="+dir, "--port="+strconv.Itoa(port),
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort), "--health-probe-bind-address=0")
	cmd.Stdout, cmd.Stderr = log, log
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = log.Close() })

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
