// Command bench measures what the webhook adds to the creation of a Flyte
// MPIJob through a real API server (envtest, as the suites run it): the
// third benchmark of docs/PERFORMANCE.md. `make bench` runs it with the
// environment `make envtest` sets.
//
// In one API server per MPIJob version, with the webhook registered as
// config/default registers it, it creates the same Flyte Horovod MPIJob, one
// at a time, in three namespaces in turn:
//
//   - "bench", which the webhook serves;
//   - the webhook's own namespace, which its namespaceSelector excludes: no
//     webhook is called. This is the reference, and the fair "no webhook":
//     same API server, same etcd, same client, same object, same moment; the
//     only difference is whether the API server calls the webhook. A second
//     API server would differ in its caches and its place on the CPU;
//     deleting the configuration between creates would wait for the API
//     server to notice each time;
//   - "bench-noop", served instead by the no-op webhook of hack/noop-webhook
//     (decode, allow, no patch) on the same controller-runtime server and
//     TLS settings: what calling any webhook costs, for context;
//   - "bench-patch", served by a webhook that decodes the review as the no-op
//     does and answers with a fixed patch, the one the webhook answers these
//     jobs with: what calling any webhook that mutates costs, for context.
//
// The order of the four rotates through all their permutations, so that the
// machine's drift falls on every arm alike. A control at the end deletes
// every webhook configuration and times the first two namespaces again, to
// show that the excluded namespace costs what no webhook at all costs.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	kjson "sigs.k8s.io/json"

	"github.com/flyteorg/flyte-mpi-webhook/hack/benchtable/table"
	"github.com/flyteorg/flyte-mpi-webhook/hack/noop-webhook/noop"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
)

// targetRatio is the target: with the webhook, at most this many
// times the latency without it.
const targetRatio = 1.25

// The namespaces the webhook and the reference webhooks serve.
const (
	servedNamespace = "bench"
	noOpNamespace   = "bench-noop"
	patchNamespace  = "bench-patch"
)

func main() {
	versions := flag.String("versions", "v1,v2beta1", "MPIJob versions to measure, each in its own API server")
	n := flag.Int("n", 300, "creates per arm and version")
	warmup := flag.Int("warmup", 30, "unmeasured creates per arm before measuring")
	control := flag.Int("control", 100, "creates per namespace of the control without any webhook configuration; 0 skips it")
	rows := flag.String("rows", "", "write the rows of make bench's table to this JSON file")
	capture := flag.String("capture", "", "write the first AdmissionReview the no-op webhook gets, per version, to DIR/review-VERSION.json: "+
		"a body for internal/admission's benchmark (BENCH_REVIEWS) or hack/load (-body), exactly as the API server sends it")
	flag.Parse()

	// The webhook logs as cmd/webhook does (JSON, info), to nowhere.
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	var all []table.Row
	for _, version := range strings.Split(*versions, ",") {
		r, err := measureVersion(context.Background(), version, *n, *warmup, *control, *capture, os.Stdout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "error: %s: %v\n", version, err)
			os.Exit(1)
		}
		all = append(all, r...)
	}
	if *rows != "" {
		if err := table.Write(*rows, all); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
	}
}

// arm is one side of the comparison: creates in one namespace.
type arm struct {
	name, namespace string
	// mutated says whether the webhook mutates the jobs created in namespace.
	mutated bool
	// referenceCalls counts the reference webhooks' answers: each create
	// must add exactly one in their arms, and none in any other.
	referenceCalls int64
	latencies      []time.Duration
}

// measureVersion starts an API server with the MPIJob CRD of version, the
// webhook and the reference webhooks, and measures every arm.
func measureVersion(ctx context.Context, version string, n, warmup, control int, captureDir string, out io.Writer) (_ []table.Row, err error) {
	startCtx, cancel := context.WithTimeout(ctx, framework.StartTimeout)
	defer cancel()
	env, err := framework.Start(startCtx, version)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	excludedNamespace, err := excluded(env)
	if err != nil {
		return nil, err
	}
	for _, ns := range []string{servedNamespace, noOpNamespace, patchNamespace, excludedNamespace} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	patch, err := webhookPatch(env)
	if err != nil {
		return nil, err
	}
	referencesCtx, stopReferences := context.WithCancel(ctx)
	defer stopReferences()
	var capture func([]byte) error
	if captureDir != "" {
		capture = func(review []byte) error {
			return os.WriteFile(filepath.Join(captureDir, "review-"+version+".json"), review, 0o644)
		}
	}
	calls, err := serveReferences(referencesCtx, env, patch, capture)
	if err != nil {
		return nil, err
	}

	arms := []arm{
		{name: "webhook", namespace: servedNamespace, mutated: true},
		{name: "no webhook", namespace: excludedNamespace},
		{name: "no-op webhook", namespace: noOpNamespace, referenceCalls: 1},
		{name: "fixed-patch webhook", namespace: patchNamespace, mutated: true, referenceCalls: 1},
	}
	for _, a := range arms {
		if err := waitUntilServed(ctx, env, a, calls); err != nil {
			return nil, err
		}
	}
	if err := rotate(ctx, env, arms, warmup, calls); err != nil {
		return nil, err
	}
	for i := range arms {
		arms[i].latencies = nil
	}
	if err := rotate(ctx, env, arms, n, calls); err != nil {
		return nil, err
	}

	var controlArms []arm
	if control > 0 {
		if controlArms, err = measureControl(ctx, env, excludedNamespace, warmup, control, calls); err != nil {
			return nil, err
		}
	}
	return report(out, version, arms, controlArms), nil
}

// excluded returns the namespace the webhook configuration excludes by name
// that is not kube-system: the webhook's own, as config/default renders it.
func excluded(env *framework.Env) (string, error) {
	for _, ns := range env.ExcludedNamespaces() {
		if ns != metav1.NamespaceSystem {
			return ns, nil
		}
	}
	return "", fmt.Errorf("the webhook configuration excludes no namespace but kube-system by name (%v): pick one for the no-webhook arm",
		env.ExcludedNamespaces())
}

// webhookPatch returns the JSON patch the webhook answers the benchmark's jobs with.
func webhookPatch(env *framework.Env) ([]byte, error) {
	object, err := newJob(env, servedNamespace).MarshalJSON()
	if err != nil {
		return nil, err
	}
	var job mutate.Job
	if err := json.Unmarshal(object, &job); err != nil {
		return nil, err
	}
	d := mutate.Decide(&job, mutate.DefaultOptions())
	if d.Outcome != mutate.OutcomeMutated {
		return nil, fmt.Errorf("the webhook does not mutate the benchmark's job: %s %v", d.Outcome, d.Err)
	}
	return json.Marshal(d.Patch)
}

// serveReferences serves the reference webhooks: the no-op for
// noOpNamespace and the fixed-patch one for patchNamespace. It takes those
// namespaces from every installed webhook configuration and registers a
// copy of the webhook's for each, pointing at its reference. It returns the
// count of the references' answers. capture, when not nil, gets the first
// review the no-op webhook gets.
func serveReferences(ctx context.Context, env *framework.Env, patch []byte, capture func([]byte) error) (*atomic.Int64, error) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "flyte-mpi-webhook-bench-")
	if err != nil {
		return nil, err
	}
	go func() { <-ctx.Done(); _ = os.RemoveAll(dir) }()
	if err := errors.Join(os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600),
		os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600)); err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := listener.Addr().(*net.TCPAddr).Port
	_ = listener.Close()

	// hack/noop-webhook's server: TLS 1.2 at least, HTTP/1.1 only.
	server := webhook.NewServer(webhook.Options{
		Host: "127.0.0.1", Port: port, CertDir: dir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12; c.NextProtos = []string{"http/1.1"} }},
	})
	calls := &atomic.Int64{}
	counted := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1); h.ServeHTTP(w, r) })
	}
	references := map[string]http.Handler{noOpNamespace: noop.Handler, patchNamespace: patching(patch)}
	if capture != nil {
		references[noOpNamespace] = capturing(noop.Handler, capture)
	}
	for ns, h := range references {
		server.Register("/"+ns, counted(h))
	}
	go func() {
		if err := server.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "reference webhooks:", err)
		}
	}()

	var installed admissionregistrationv1.MutatingWebhookConfigurationList
	if err := env.Client.List(ctx, &installed); err != nil {
		return nil, err
	}
	for i := range installed.Items {
		hook := &installed.Items[i]
		for j := range hook.Webhooks {
			w := &hook.Webhooks[j]
			if w.NamespaceSelector == nil {
				w.NamespaceSelector = &metav1.LabelSelector{}
			}
			w.NamespaceSelector.MatchExpressions = append(w.NamespaceSelector.MatchExpressions, metav1.LabelSelectorRequirement{
				Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{noOpNamespace, patchNamespace}})
		}
		if err := env.Client.Update(ctx, hook); err != nil {
			return nil, err
		}
	}
	for ns := range references {
		hook := env.Webhook.DeepCopy()
		hook.ObjectMeta = metav1.ObjectMeta{Name: ns}
		url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/" + ns
		for i := range hook.Webhooks {
			w := &hook.Webhooks[i]
			w.Name = ns + "." + w.Name
			w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: certPEM}
			w.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{ns}}}}
		}
		if err := env.Client.Create(ctx, hook); err != nil {
			return nil, err
		}
	}
	return calls, nil
}

// capturing passes the first request's body to capture, and every request to h.
func capturing(h http.Handler, capture func([]byte) error) http.Handler {
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() {
			body, err := io.ReadAll(r.Body)
			if err == nil {
				err = capture(body)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "capturing a review:", err)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		})
		h.ServeHTTP(w, r)
	})
}

// patching answers every AdmissionReview as the no-op does, but with patch:
// the least a webhook that mutates can do.
func patching(patch []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 8<<20))
		if err == nil {
			err = kjson.UnmarshalCaseSensitivePreserveInts(body, &review)
		}
		if err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		patchType := admissionv1.PatchTypeJSONPatch
		response, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: &admissionv1.AdmissionResponse{
			UID: review.Request.UID, Allowed: true, Patch: patch, PatchType: &patchType}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(response)
	})
}

// waitUntilServed waits until a dry-run create in a's namespace is answered
// as a expects: mutated or not, and by the no-op or not. The API server
// applies a change of webhook configuration a little after it is stored.
func waitUntilServed(ctx context.Context, env *framework.Env, a arm, calls *atomic.Int64) error {
	deadline := time.Now().Add(time.Minute)
	for {
		job := newJob(env, a.namespace)
		before := calls.Load()
		err := env.Client.Create(ctx, job, client.DryRunAll)
		if err == nil && mutated(job) == a.mutated && calls.Load()-before == a.referenceCalls {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a dry-run create in %s never had mutated=%t with %d no-op calls (last error: %v)",
				a.namespace, a.mutated, a.referenceCalls, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func newJob(env *framework.Env, namespace string) *unstructured.Unstructured {
	return env.FlyteJob(namespace).Annotation(mutate.AnnotationTaskCustom, framework.FlytekitCustom).Obj()
}

func mutated(job *unstructured.Unstructured) bool {
	return job.GetAnnotations()[mutate.AnnotationWorkerCommandSource] != ""
}

// rotate creates n jobs per arm, one at a time, cycling through every order
// of the arms, so that drift in the machine's speed falls on all alike.
func rotate(ctx context.Context, env *framework.Env, arms []arm, n int, calls *atomic.Int64) error {
	orders := permutations(len(arms))
	for i := range n {
		for _, a := range orders[i%len(orders)] {
			if err := create(ctx, env, &arms[a], calls); err != nil {
				return err
			}
		}
	}
	return nil
}

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var all [][]int
	for _, p := range permutations(n - 1) {
		for i := range n {
			all = append(all, slices.Insert(slices.Clone(p), i, n-1))
		}
	}
	return all
}

// create creates one Flyte MPIJob for a, timing the API call alone, and
// checks that it was answered as a expects.
func create(ctx context.Context, env *framework.Env, a *arm, calls *atomic.Int64) error {
	job := newJob(env, a.namespace)
	before := calls.Load()
	start := time.Now()
	err := env.Client.Create(ctx, job)
	elapsed := time.Since(start)
	if err != nil {
		return fmt.Errorf("creating an MPIJob in %s: %w", a.namespace, err)
	}
	if mutated(job) != a.mutated || calls.Load()-before != a.referenceCalls {
		return fmt.Errorf("an MPIJob created in %s: mutated %t with %d no-op calls, want %t with %d",
			a.namespace, mutated(job), calls.Load()-before, a.mutated, a.referenceCalls)
	}
	a.latencies = append(a.latencies, elapsed)
	return nil
}

// measureControl deletes every webhook configuration and times creates in
// the served and the excluded namespaces again, with no webhook at all.
func measureControl(ctx context.Context, env *framework.Env, excludedNamespace string, warmup, n int, calls *atomic.Int64) ([]arm, error) {
	if err := env.Client.DeleteAllOf(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{}); err != nil {
		return nil, err
	}
	arms := []arm{
		{name: "control: served namespace", namespace: servedNamespace},
		{name: "control: excluded namespace", namespace: excludedNamespace},
	}
	if err := waitUntilServed(ctx, env, arms[0], calls); err != nil {
		return nil, err
	}
	if err := rotate(ctx, env, arms, warmup, calls); err != nil {
		return nil, err
	}
	for i := range arms {
		arms[i].latencies = nil
	}
	return arms, rotate(ctx, env, arms, n, calls)
}

// report prints the latencies of each arm and returns the table's rows:
// the webhook's arm against the excluded namespace's.
func report(out io.Writer, version string, arms, controlArms []arm) []table.Row {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tCREATES\tP50\tP90\tP99\tMAX\tP50 RATIO\tP99 RATIO\n", version)
	reference := arms[1].latencies
	for _, a := range append(slices.Clone(arms), controlArms...) {
		fmt.Fprintf(tw, "%s (%s)\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.name, a.namespace, len(a.latencies),
			round(table.Percentile(a.latencies, 50)), round(table.Percentile(a.latencies, 90)),
			round(table.Percentile(a.latencies, 99)), round(table.Percentile(a.latencies, 100)),
			table.Times(ratio(a.latencies, reference, 50)), table.Times(ratio(a.latencies, reference, 99)))
	}
	_ = tw.Flush()
	fmt.Fprintln(out)

	var rows []table.Row
	for _, p := range []float64{50, 99} {
		r := ratio(arms[0].latencies, reference, p)
		rows = append(rows, table.Row{
			Benchmark: fmt.Sprintf("API server: %s create p%.0f", version, p),
			Ours:      round(table.Percentile(arms[0].latencies, p)).String(), Reference: round(table.Percentile(reference, p)).String(),
			Ratio: table.Times(r), Target: fmt.Sprintf("≤ %.2f×", targetRatio), Met: r <= targetRatio,
		})
	}
	return rows
}

// ratio is the p-th percentile of latencies over that of reference.
func ratio(latencies, reference []time.Duration, p float64) float64 {
	return float64(table.Percentile(latencies, p)) / float64(table.Percentile(reference, p))
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
