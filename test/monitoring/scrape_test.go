package monitoring

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/envtest/framework"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

var (
	rulesPath     = flag.String("rules", "config/prometheus/rules.yaml", "the Prometheus rule file to check, from the repository root unless absolute")
	dashboardPath = flag.String("dashboard", "config/grafana/flyte-mpi-webhook.json", "the Grafana dashboard to check, from the repository root unless absolute")
	webhookBinary = flag.String("webhook", "", "a webhook binary to run; empty: go build ./cmd/webhook")
	scrapeOut     = flag.String("scrape-out", "", "a file to write the families of interest to, with their labels and the values seen")
)

// webhookName is the webhook's name in config/webhook/manifests.yaml:
// kube-apiserver's apiserver_admission_webhook_* metrics carry it as name.
const webhookName = "mpijob-worker-command.mpi.flyte.org"

// interesting are the prefixes of the families printed, and written to -scrape-out.
var interesting = []string{
	"apiserver_admission_webhook_", "apiserver_admission_match_condition_", "apiserver_admission_step_",
	"apiserver_mutating_admission_policy_", "apiserver_validating_admission_policy_",
	"flyte_mpi_webhook_", "controller_runtime_webhook_",
}

// pollTimeout bounds each wait: for a process to serve, for the API server
// to pick up a configuration or a policy.
const pollTimeout = 60 * time.Second

// TestQueriesAgainstScrape scrapes the real binaries, kube-apiserver
// (envtest's) and the webhook (built from ./cmd/webhook), after traffic that
// makes every series the rules may use, and checks the rule file's and the
// dashboard's expressions against that scrape.
func TestQueriesAgainstScrape(t *testing.T) {
	root, err := fixtures.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var queries []Query
	for _, read := range []struct {
		path *string
		read func(string) ([]Query, error)
	}{{rulesPath, RuleQueries}, {dashboardPath, DashboardQueries}} {
		path := *read.path
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, path)
		}
		q, err := read.read(path)
		if err != nil {
			t.Fatal(err)
		}
		queries = append(queries, q...)
	}

	s := startScrapeEnv(t, root)
	s.driveTraffic(t)
	families := s.scrape(t)
	report(t, families)
	s.checkMade(t, families)

	problems, notes := Check(queries, NewIndex(families...))
	for _, n := range notes {
		t.Logf("note (not a failure): %v", n)
	}
	for _, p := range problems {
		t.Errorf("%v", p)
	}
	t.Logf("%d expressions checked against %d families", len(queries), len(NewIndex(families...)))
}

// scrapeEnv is an API server with the MPIJob CRD and the webhook binary, serving.
type scrapeEnv struct {
	ctx       context.Context
	root      string
	config    *rest.Config
	client    client.Client
	clientset *kubernetes.Clientset
	ca        *fixtures.Authority
	// webhookPort is where the binary serves the webhook; metricsURL its metrics.
	webhookPort int
	metricsURL  string
	namespace   string
	// hookName is the webhook configuration's, once installed.
	hookName string
	// made are the series each step of the traffic must have made.
	made []wantSeries
	// start is when the test started, for the steps' times in the log.
	start time.Time
}

// wantSeries is a series the traffic must make: of a family, with these labels among its own.
type wantSeries struct {
	family string
	labels map[string]string
}

func (w wantSeries) String() string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(w.labels)) {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, w.labels[k]))
	}
	return w.family + "{" + strings.Join(pairs, ", ") + "}"
}

// expect records that the step just done must have made a series of family with labels (name=value pairs).
func (s *scrapeEnv) expect(family string, labels ...string) {
	w := wantSeries{family: family, labels: map[string]string{}}
	for i := 0; i+1 < len(labels); i += 2 {
		w.labels[labels[i]] = labels[i+1]
	}
	s.made = append(s.made, w)
}

// step logs that a step of the traffic is done, and when.
func (s *scrapeEnv) step(t *testing.T, what string) {
	t.Helper()
	t.Logf("%5.1fs %s", time.Since(s.start).Seconds(), what)
}

// checkMade fails t for each series the traffic should have made that the scrapes lack.
func (s *scrapeEnv) checkMade(t *testing.T, scrapes [][]*Family) {
	t.Helper()
	for _, w := range s.made {
		var found *Family
		for _, families := range scrapes {
			for _, f := range families {
				if f.Name == w.family {
					found = f
				}
			}
		}
		if found == nil {
			t.Errorf("the traffic made no %s: no such family in the scrapes", w)
			continue
		}
		if !slices.ContainsFunc(found.Series, func(series map[string]string) bool {
			for k, v := range w.labels {
				if series[k] != v {
					return false
				}
			}
			return true
		}) {
			t.Errorf("the traffic made no %s: %s has %v", w, w.family, found.LabelValues())
		}
	}
}

// startScrapeEnv starts kube-apiserver and etcd (KUBEBUILDER_ASSETS) with
// the kubeflow.org/v1 MPIJob CRD (MPIJOB_CRD_V1), and the webhook binary
// with a serving certificate of a CA of its own; each is stopped when t ends.
func startScrapeEnv(t *testing.T, root string) *scrapeEnv {
	crd := os.Getenv("MPIJOB_CRD_V1")
	if crd == "" || os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("MPIJOB_CRD_V1 or KUBEBUILDER_ASSETS is not set: run it with make monitoring-check")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	s := &scrapeEnv{ctx: ctx, root: root, start: time.Now()}
	// The clients' logger: controller-runtime warns, with a stack, when none is set.
	logf.SetLogger(logr.Discard())

	binary := *webhookBinary
	built := make(chan error, 1)
	if binary == "" {
		binary = filepath.Join(t.TempDir(), "webhook")
		go func() { built <- goBuild(ctx, root, binary) }()
	} else {
		built <- nil
	}

	testEnv := &envtest.Environment{
		CRDInstallOptions:     envtest.CRDInstallOptions{Paths: []string{crd}},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	if s.config, err = testEnv.Start(); err != nil {
		t.Fatalf("starting envtest (KUBEBUILDER_ASSETS=%s): %v", os.Getenv("KUBEBUILDER_ASSETS"), err)
	}
	t.Cleanup(func() {
		if err := testEnv.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	if s.client, err = client.New(s.config, client.Options{}); err != nil {
		t.Fatal(err)
	}
	if s.clientset, err = kubernetes.NewForConfig(s.config); err != nil {
		t.Fatal(err)
	}
	version, err := s.clientset.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	s.step(t, "kube-apiserver "+version.GitVersion+" serves")

	certDir := t.TempDir()
	if s.ca, err = fixtures.WriteServingCert(certDir); err != nil {
		t.Fatal(err)
	}
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	s.step(t, "the webhook binary is built")
	s.runWebhook(t, binary, certDir)
	s.step(t, "the webhook is ready")
	s.expect("flyte_mpi_webhook_serving_certificate_expiration_timestamp_seconds")
	s.expect("flyte_mpi_webhook_build_info")

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "monitoring-"}}
	if err := s.client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	s.namespace = ns.Name
	return s
}

// goBuild builds the webhook binary as a user's go build does.
func goBuild(ctx context.Context, root, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/webhook")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/webhook: %w\n%s", err, b)
	}
	return nil
}

// runWebhook runs the binary, its ports on loopback, until t ends, and waits
// until it is ready.
func (s *scrapeEnv) runWebhook(t *testing.T, binary, certDir string) {
	ports := make([]int, 3)
	for i := range ports {
		var err error
		if ports[i], err = framework.FreePort("127.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	s.webhookPort = ports[0]
	s.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1])
	logPath := filepath.Join(t.TempDir(), "webhook.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "--cert-dir="+certDir, "--port="+strconv.Itoa(ports[0]),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[2]),
		"--shutdown-drain=0s")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Killed with the test binary (go test's -timeout, a crash), so that it never outlives its test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		defer logFile.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the webhook (pid %d) exited after SIGTERM: %v", cmd.Process.Pid, err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("the webhook (pid %d) did not stop within 30 s of SIGTERM: killed (%v)", cmd.Process.Pid, <-exited)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("the webhook's log:\n%s", tail(b, 4000))
		}
	})
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2])
	s.poll(t, "the webhook (pid "+strconv.Itoa(cmd.Process.Pid)+") is ready", func() (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("the webhook exited: %v", err)
		default:
		}
		resp, err := http.Get(readyz)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// poll calls cond every 100 ms until it holds, for pollTimeout at most, and
// fails t, naming what it waited for and the last error, if it never does.
// An error from cond that wraps errStop ends the wait at once.
func (s *scrapeEnv) poll(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, pollTimeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		if err != nil && errors.Is(err, errStop) {
			return false, err
		}
		last = err
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting until %s: %v", what, errors.Join(err, last))
	}
}

var errStop = errors.New("stop waiting")

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// job is testdata/flyte/v1/NAME.yaml, a Flyte-built MPIJob, in the env's namespace, with a generateName.
func (s *scrapeEnv) job(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := fixtures.FlyteJob("v1", name)
	if err != nil {
		t.Fatal(err)
	}
	obj.SetNamespace(s.namespace)
	obj.SetGenerateName(obj.GetName() + "-")
	obj.SetName("")
	return obj
}

// mutated reports whether a stored job carries the webhook's (or the policy's) source annotation.
func mutated(obj *unstructured.Unstructured) bool {
	_, ok := obj.GetAnnotations()[mutate.AnnotationWorkerCommandSource]
	return ok
}

// renderedHook returns the webhook configuration of a config/ install, as
// rendered, checked to hold the one webhook webhookName, pointed at the
// binary (or at port, when not 0) with the CA's bundle.
func (s *scrapeEnv) renderedHook(t *testing.T, install string, port int) (*admissionregistrationv1.MutatingWebhookConfiguration, *manifests.Manifests) {
	t.Helper()
	m, err := manifests.Render(filepath.Join(s.root, "config", install), "")
	if err != nil {
		t.Fatal(err)
	}
	hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := m.Decode("MutatingWebhookConfiguration", hook); err != nil {
		t.Fatal(err)
	}
	if len(hook.Webhooks) != 1 || hook.Webhooks[0].Name != webhookName {
		t.Fatalf("config/%s: the MutatingWebhookConfiguration's webhooks are not the one %s that the rules name", install, webhookName)
	}
	if port == 0 {
		port = s.webhookPort
	}
	w := &hook.Webhooks[0]
	at := fmt.Sprintf("https://127.0.0.1:%d%s", port, *w.ClientConfig.Service.Path)
	w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &at, CABundle: s.ca.CertPEM}
	return hook, m
}

// installHook creates the configuration, or replaces the webhooks of the one installed.
func (s *scrapeEnv) installHook(t *testing.T, hook *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	if s.hookName == "" {
		if err := s.client.Create(s.ctx, hook); err != nil {
			t.Fatal(err)
		}
		s.hookName = hook.Name
		return
	}
	installed := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := s.client.Get(s.ctx, client.ObjectKey{Name: s.hookName}, installed); err != nil {
		t.Fatal(err)
	}
	installed.Webhooks = hook.Webhooks
	if err := s.client.Update(s.ctx, installed); err != nil {
		t.Fatal(err)
	}
}

// decisions returns the sum of the webhook's flyte_mpi_webhook_decisions_total.
func (s *scrapeEnv) decisions(t *testing.T) float64 {
	t.Helper()
	b, err := httpGet(s.ctx, http.DefaultClient, s.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for line := range strings.Lines(string(b)) {
		if labelsAndValue, ok := strings.CutPrefix(line, "flyte_mpi_webhook_decisions_total{"); ok {
			_, value, _ := strings.Cut(labelsAndValue, "} ")
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				t.Fatalf("flyte_mpi_webhook_decisions_total: %q: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// driveTraffic makes the series the rules may use, each step through the
// API server: jobs admitted and patched, one denied, the webhook
// unreachable with failurePolicy Fail (refused: calling_webhook_error) and
// with Ignore (admitted: fail open), then the admission policies of
// config/default-with-policy beside its webhook.
func (s *scrapeEnv) driveTraffic(t *testing.T) {
	t.Helper()
	ctx := s.ctx
	hook, _ := s.renderedHook(t, "default", 0)
	s.installHook(t, hook)

	// Admitted and patched: once the API server calls the webhook, every Flyte-built job.
	s.poll(t, "the API server calls the webhook", func() (bool, error) {
		job := s.job(t, fixtures.HorovodWorkerCommand)
		if err := s.client.Create(ctx, job); err != nil {
			return false, err
		}
		return mutated(job), nil
	})
	names, err := fixtures.FlyteJobNames("v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := s.client.Create(ctx, s.job(t, name)); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
	}
	s.step(t, fmt.Sprintf("config/default: %d Flyte jobs admitted", len(names)))
	s.expect("apiserver_admission_webhook_request_total", "name", webhookName, "rejected", "false", "code", "200")
	s.expect("apiserver_admission_webhook_admission_duration_seconds", "name", webhookName, "rejected", "false")
	s.expect("flyte_mpi_webhook_decisions_total", "outcome", string(mutate.OutcomeMutated), "source", string(mutate.SourceFlyteWorkerArgs))
	s.expect("flyte_mpi_webhook_decisions_total", "outcome", string(mutate.OutcomeUnchanged), "source", string(mutate.SourceNone))
	called, err := url.Parse(*hook.Webhooks[0].ClientConfig.URL)
	if err != nil {
		t.Fatal(err)
	}
	s.expect("controller_runtime_webhook_requests_total", "webhook", called.Path, "code", "200")

	// Denied: an invalid task-custom annotation.
	invalid := s.job(t, fixtures.HorovodNoWorkerCommand)
	invalid.SetAnnotations(map[string]string{mutate.AnnotationTaskCustom: "not base64 protobuf"})
	if err := s.client.Create(ctx, invalid); err == nil || !strings.Contains(err.Error(), "denied the request") {
		t.Fatalf("a job with an invalid %s annotation: %v, want the webhook's denial", mutate.AnnotationTaskCustom, err)
	}
	s.step(t, "config/default: a job with an invalid annotation denied")
	s.expect("apiserver_admission_webhook_rejection_count", "name", webhookName, "error_type", "no_error")
	s.expect("apiserver_admission_webhook_request_total", "name", webhookName, "rejected", "true")
	s.expect("flyte_mpi_webhook_decisions_total", "outcome", string(mutate.OutcomeDeniedInvalid))

	// Unreachable, failurePolicy Fail: a port nothing listens on; the create is refused.
	closed, err := framework.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	unreachable, _ := s.renderedHook(t, "default", closed)
	if fp := unreachable.Webhooks[0].FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
		t.Fatalf("config/default's failurePolicy is %v, not Fail", fp)
	}
	s.installHook(t, unreachable)
	s.poll(t, "the API server refuses a job, failing to call the webhook", func() (bool, error) {
		err := s.client.Create(ctx, s.job(t, fixtures.HorovodWorkerCommand))
		return err != nil && strings.Contains(err.Error(), "failed calling webhook"), nil
	})
	s.step(t, "failurePolicy Fail, the webhook unreachable: a job refused")
	s.expect("apiserver_admission_webhook_rejection_count", "name", webhookName, "error_type", "calling_webhook_error")

	// Unreachable, failurePolicy Ignore: the job is admitted as it is (fail open).
	ignore := admissionregistrationv1.Ignore
	unreachable.Webhooks[0].FailurePolicy = &ignore
	s.installHook(t, unreachable)
	s.poll(t, "the API server admits a job unchanged, failing to call the webhook (fail open)", func() (bool, error) {
		job := s.job(t, fixtures.HorovodWorkerCommand)
		if err := s.client.Create(ctx, job); err != nil {
			return false, nil // still Fail
		}
		return !mutated(job), nil
	})
	s.step(t, "failurePolicy Ignore, the webhook unreachable: a job admitted as it was")
	s.expect("apiserver_admission_webhook_fail_open_count", "name", webhookName)

	s.drivePolicies(t)
}

// drivePolicies installs config/default-with-policy: its webhook (with
// matchConditions) pointed at the binary, the MutatingAdmissionPolicy where
// the API server serves it in admissionregistration.k8s.io/v1 (Kubernetes
// 1.36 on), and the ValidatingAdmissionPolicy; then creates a job the
// mutating policy alone patches, one the validating policy warns about, one
// with an annotation the webhook decodes, and one it denies.
func (s *scrapeEnv) drivePolicies(t *testing.T) {
	t.Helper()
	ctx := s.ctx
	resources, err := s.clientset.Discovery().ServerResourcesForGroupVersion(admissionregistrationv1.SchemeGroupVersion.String())
	if err != nil {
		t.Fatal(err)
	}
	mapServed := slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "mutatingadmissionpolicies" })
	if !mapServed {
		t.Logf("this API server serves no admissionregistration.k8s.io/v1 MutatingAdmissionPolicy: the mutating policy is left out")
	}
	hook, m := s.renderedHook(t, "default-with-policy", 0)
	if len(hook.Webhooks[0].MatchConditions) == 0 {
		t.Fatal("config/default-with-policy's webhook has no matchConditions")
	}
	var installed []string
	var mutatingPolicy, validatingPolicy string
	for _, obj := range m.Objects {
		switch kind := obj.GetKind(); kind {
		case "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding":
			if !mapServed {
				continue
			}
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		default:
			continue
		}
		obj = obj.DeepCopy()
		obj.SetNamespace("") // cluster-scoped
		if err := s.client.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		installed = append(installed, obj.GetKind()+" "+obj.GetName())
		switch obj.GetKind() {
		case "MutatingAdmissionPolicy":
			mutatingPolicy = obj.GetName()
		case "ValidatingAdmissionPolicy":
			validatingPolicy = obj.GetName()
		}
	}
	s.installHook(t, hook)
	s.step(t, "config/default-with-policy installed: "+strings.Join(installed, ", "))

	// A job whose task declares a worker command, without annotations: the
	// webhook's matchConditions leave it to the policy. Its decisions do not
	// move once the API server has picked up both. Until the API server's
	// type converters know the MPIJob CRD (they refresh every 5 s), the
	// mutating policy refuses the job, 503 "Resource kind ... not found",
	// and counts apiserver_mutating_admission_policy_check_total with
	// error_type invalid_error: the CRD is seconds old here.
	want := "patched by the mutating policy alone"
	if !mapServed {
		want = "left alone, the webhook's matchConditions excluding it"
	}
	s.poll(t, "a Flyte job is "+want, func() (bool, error) {
		before := s.decisions(t)
		job := s.job(t, fixtures.HorovodWorkerCommand)
		if err := s.client.Create(ctx, job); err != nil {
			return false, err
		}
		return mutated(job) == mapServed && s.decisions(t) == before, nil
	})
	s.step(t, "config/default-with-policy: a Flyte job "+want)
	s.expect("apiserver_admission_match_condition_exclusions_total", "name", webhookName)
	if mutatingPolicy != "" {
		s.expect("apiserver_mutating_admission_policy_check_total", "policy", mutatingPolicy, "error_type", "no_error")
	}

	// The validating policy warns about a sidecar before the MPI container.
	cfg := rest.CopyConfig(s.config)
	warnings := &framework.WarningRecorder{}
	cfg.WarningHandler = warnings
	warned, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.poll(t, "the validating policy warns", func() (bool, error) {
		job := s.job(t, fixtures.HorovodWorkerCommand)
		containers := framework.WorkerContainers(job)
		if err := unstructured.SetNestedSlice(job.Object, append([]any{map[string]any{"name": "sidecar", "image": "busybox"}}, containers...),
			framework.WorkerContainersPath...); err != nil {
			return false, errors.Join(errStop, err)
		}
		before := len(warnings.Messages())
		if err := warned.Create(ctx, job); err != nil {
			return false, err
		}
		return len(warnings.Messages()) > before, nil
	})
	s.step(t, "config/default-with-policy: the validating policy warns")
	s.expect("apiserver_validating_admission_policy_check_total", "policy", validatingPolicy, "enforcement_action", "warn")

	// An annotation the webhook decodes: its matchConditions send the job to it.
	annotated := s.job(t, fixtures.HorovodTaskAnnotations)
	if err := s.client.Create(ctx, annotated); err != nil || !mutated(annotated) {
		t.Fatalf("a job with the task-custom annotation, through config/default-with-policy: %v, mutated %t", err, mutated(annotated))
	}
	invalid := s.job(t, fixtures.HorovodNoWorkerCommand)
	invalid.SetAnnotations(map[string]string{mutate.AnnotationTaskCustom: "not base64 protobuf"})
	if err := s.client.Create(ctx, invalid); err == nil || !strings.Contains(err.Error(), "denied the request") {
		t.Fatalf("a job with an invalid %s annotation, through config/default-with-policy: %v, want the webhook's denial", mutate.AnnotationTaskCustom, err)
	}
	s.step(t, "config/default-with-policy: an annotated job patched by the webhook, an invalid one denied")
	s.expect("flyte_mpi_webhook_decisions_total", "outcome", string(mutate.OutcomeMutated), "source", string(mutate.SourceTaskCustom))
}

// scrape reads /metrics of kube-apiserver (as an admin) and of the webhook.
func (s *scrapeEnv) scrape(t *testing.T) [][]*Family {
	t.Helper()
	apiserver, err := s.clientset.Discovery().RESTClient().Get().AbsPath("/metrics").
		SetHeader("Accept", string(expfmtText)).DoRaw(s.ctx)
	if err != nil {
		t.Fatalf("GET /metrics of kube-apiserver: %v", err)
	}
	webhook, err := httpGet(s.ctx, http.DefaultClient, s.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	var all [][]*Family
	for source, b := range map[string][]byte{"kube-apiserver": apiserver, "webhook": webhook} {
		families, err := ParseScrape(source, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, families)
	}
	return all
}

// expfmtText is the text format, which both binaries serve when asked.
const expfmtText = "text/plain;version=0.0.4"

func httpGet(ctx context.Context, c *http.Client, address string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, address, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", expfmtText)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", address, resp.Status, tail(b, 500))
	}
	return b, err
}

// report logs the families of interest, with their labels and the values
// seen, and writes them to -scrape-out.
func report(t *testing.T, scrapes [][]*Family) {
	t.Helper()
	var out strings.Builder
	for _, families := range scrapes {
		for _, f := range families {
			if !slices.ContainsFunc(interesting, func(p string) bool { return strings.HasPrefix(f.Name, p) }) {
				continue
			}
			fmt.Fprintf(&out, "%s (%s, %s)\n", f.Name, f.Type, f.Source)
			values := f.LabelValues()
			for _, l := range slices.Sorted(maps.Keys(values)) {
				v := values[l]
				more := ""
				if len(v) > 12 {
					v, more = v[:12], fmt.Sprintf(" and %d more", len(v)-12)
				}
				fmt.Fprintf(&out, "    %s: %s%s\n", l, strings.Join(v, ", "), more)
			}
		}
	}
	t.Logf("the families of interest in the scrape:\n%s", out.String())
	if *scrapeOut != "" {
		if err := os.WriteFile(*scrapeOut, []byte(out.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}
