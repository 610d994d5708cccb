//go:build unix

package admission

// The in-process benchmark of docs/PERFORMANCE.md: the whole admission path,
// an AdmissionReview's bytes in and the response's bytes out, for the Flyte
// Horovod MPIJobs in testdata, against two references on the same bodies:
//
//   - floor: decode the review into the typed AdmissionReview and allow it,
//     with no patch (package noop, which the load benchmark's no-op webhook
//     serves too);
//   - conventional: what a kubebuilder Defaulter does: decode the review with
//     controller-runtime's codec, json.Unmarshal the object into mpi-operator's
//     typed MPIJob, set the worker command, json.Marshal it and diff the two
//     with admission.PatchResponseFromRaw.
//
// Two more, for context only: floor-controller-runtime, controller-runtime's
// admission.Webhook with a handler that allows everything; and
// defaulter-controller-runtime, admission.WithDefaulter itself, which also
// deep-copies and compares the object and, because the patch removes args,
// computes a second patch to keep the fields the typed object dropped.
//
//	go test -run '^$' -bench '^BenchmarkAdmit$' -benchmem -count 6 ./internal/admission > admit.txt
//	benchstat -row /version -col /path admit.txt
//
// make bench runs it and prints the ratios against the targets. Besides
// ns/op (wall time) it reports cpu-ns/op, the process's CPU time per op,
// garbage collection included, which varies less on a shared machine.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	kubeflowv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flyteorg/flyte-mpi-webhook/hack/noop-webhook/noop"
	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

// admitFunc is one way of answering an AdmissionReview: its bytes in, the response's bytes out.
type admitFunc func(ctx context.Context, body []byte) ([]byte, error)

// benchPath is one admitFunc under its benchmark name; wantPatch says whether it must return a patch.
type benchPath struct {
	name      string
	admit     admitFunc
	wantPatch bool
}

// benchPaths returns the paths compared, for MPIJobs of version.
func benchPaths(version string) []benchPath {
	h := newHandler()
	floorCR := &cradmission.Webhook{Handler: cradmission.HandlerFunc(
		func(context.Context, cradmission.Request) cradmission.Response { return cradmission.Allowed("") })}
	defaulter := cradmission.WithDefaulter[*kubeflowv2beta1.MPIJob](mpiJobScheme(version), workerCommandDefaulter{mutate.DefaultOptions()})
	return []benchPath{
		{"webhook", h.Admit, true},
		{"floor", func(_ context.Context, body []byte) ([]byte, error) { return noop.Admit(body) }, false},
		{"conventional", admitConventionally, true},
		{"floor-controller-runtime", serveLikeControllerRuntime(floorCR), false},
		{"defaulter-controller-runtime", serveLikeControllerRuntime(defaulter), true},
	}
}

// benchInput is an AdmissionReview the benchmark answers, and the MPIJob version it carries.
type benchInput struct {
	name, version string
	body          []byte
}

// benchInputs returns the reviews the API server sends when Flyte creates
// the Horovod MPIJob of testdata/mpijob-VERSION.yaml with the task custom
// flytekit writes, v1 and v2beta1 (3.9 KB each), and those in the files
// that BENCH_REVIEWS lists (as filepath.SplitList splits it): reviews exactly
// as an API server sent them, e.g. written by test/envtest/bench -capture,
// which carry the object's managedFields too (6.8 KB).
func benchInputs(t testing.TB) []benchInput {
	var inputs []benchInput
	for _, version := range []string{"v1", "v2beta1"} {
		inputs = append(inputs, benchInput{version, version,
			reviewOf(t, version, "CREATE", sampleJob(t, version, annotate(mutate.AnnotationTaskCustom, flytekitCustom)))})
	}
	for _, path := range filepath.SplitList(os.Getenv("BENCH_REVIEWS")) {
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var rev admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &rev); err != nil || rev.Request == nil {
			t.Fatalf("%s: not an AdmissionReview: %v", path, err)
		}
		inputs = append(inputs, benchInput{strings.TrimSuffix(filepath.Base(path), ".json"), rev.Request.Kind.Version, body})
	}
	return inputs
}

var setLoggerOnce sync.Once

// benchContext carries the logger cmd/webhook runs with (zap, JSON, info),
// writing nowhere: the webhook logs one line per decision, and that line is
// part of its cost. controller-runtime's admission.Webhook logs to the
// global logger, so that is set to the same.
func benchContext() context.Context {
	log := zap.New(zap.WriteTo(io.Discard))
	setLoggerOnce.Do(func() { logf.SetLogger(log) })
	return logf.IntoContext(context.Background(), log)
}

// BenchmarkAdmit answers each input with each path, after checking the answer.
func BenchmarkAdmit(b *testing.B) {
	ctx := benchContext()
	for _, in := range benchInputs(b) {
		for _, p := range benchPaths(in.version) {
			b.Run("version="+in.name+"/path="+p.name, func(b *testing.B) {
				checkAnswer(b, p, in.body)
				body := in.body
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				cpu := processCPUTime(b)
				for b.Loop() {
					if _, err := p.admit(ctx, body); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(processCPUTime(b)-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// processCPUTime is the CPU time the process has used, garbage collection
// included. On a shared machine it varies less than ns/op, which is wall time.
func processCPUTime(t testing.TB) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		t.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// TestBenchmarkPaths checks that every path the benchmark compares answers
// the benchmark's reviews correctly, so that no ratio is against a path that
// does less than it should.
func TestBenchmarkPaths(t *testing.T) {
	for _, in := range benchInputs(t) {
		for _, p := range benchPaths(in.version) {
			t.Run(in.name+"/"+p.name, func(t *testing.T) { checkAnswer(t, p, in.body) })
		}
	}
}

// checkAnswer checks that p allows body with its uid and, when p mutates,
// with a patch that makes the worker run sshd.
func checkAnswer(t testing.TB, p benchPath, body []byte) {
	t.Helper()
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil {
		t.Fatal(err)
	}
	out, err := p.admit(benchContext(), body)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &rev); err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	resp := rev.Response
	if rev.APIVersion != "admission.k8s.io/v1" || rev.Kind != "AdmissionReview" || resp == nil ||
		resp.UID != in.Request.UID || !resp.Allowed {
		t.Fatalf("%s: not an allowed AdmissionReview response with the uid: %s", p.name, out)
	}
	if !p.wantPatch {
		if len(resp.Patch) != 0 {
			t.Fatalf("%s: a patch from a path that must not patch: %s", p.name, resp.Patch)
		}
		return
	}
	var job kubeflowv2beta1.MPIJob
	if err := json.Unmarshal(applyPatch(t, in.Request.Object.Raw, resp), &job); err != nil {
		t.Fatal(err)
	}
	worker := job.Spec.MPIReplicaSpecs[kubeflowv2beta1.MPIReplicaTypeWorker].Template.Spec.Containers[0]
	if !slices.Equal(worker.Command, sshd) || worker.Args != nil {
		t.Fatalf("%s: the patched worker runs command %q args %q", p.name, worker.Command, worker.Args)
	}
}

// admitConventionally is the conventional way, step by step, as the issue
// defines it: the minimum of what admission.WithDefaulter does.
func admitConventionally(ctx context.Context, body []byte) ([]byte, error) {
	req, err := decodeLikeControllerRuntime(body)
	if err != nil {
		return nil, err
	}
	var job kubeflowv2beta1.MPIJob
	if err := json.Unmarshal(req.Object.Raw, &job); err != nil {
		return nil, err
	}
	var resp cradmission.Response
	if err := (workerCommandDefaulter{mutate.DefaultOptions()}).Default(ctx, &job); err != nil {
		resp = cradmission.Denied(err.Error())
	} else {
		marshalled, err := json.Marshal(&job)
		if err != nil {
			return nil, err
		}
		resp = cradmission.PatchResponseFromRaw(req.Object.Raw, marshalled)
	}
	if err := resp.Complete(req); err != nil {
		return nil, err
	}
	return encodeLikeControllerRuntime(resp)
}

// serveLikeControllerRuntime answers a review as admission.Webhook.ServeHTTP
// does, without the HTTP: its decode, wh.Handle, its encode.
func serveLikeControllerRuntime(wh *cradmission.Webhook) admitFunc {
	return func(ctx context.Context, body []byte) ([]byte, error) {
		req, err := decodeLikeControllerRuntime(body)
		if err != nil {
			return nil, err
		}
		return encodeLikeControllerRuntime(wh.Handle(ctx, req))
	}
}

// admissionCodecs is controller-runtime's codec for AdmissionReviews, which
// its admission package keeps unexported.
var admissionCodecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	utilruntime.Must(admissionv1.AddToScheme(scheme))
	return serializer.NewCodecFactory(scheme)
}()

// unversionedAdmissionReview is controller-runtime's: it decodes v1 and v1beta1 alike.
type unversionedAdmissionReview struct {
	admissionv1.AdmissionReview
}

// decodeLikeControllerRuntime is admission.Webhook.ServeHTTP's decode.
func decodeLikeControllerRuntime(body []byte) (cradmission.Request, error) {
	req := cradmission.Request{}
	ar := unversionedAdmissionReview{}
	ar.Request = &req.AdmissionRequest
	ar.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"))
	_, _, err := admissionCodecs.UniversalDeserializer().Decode(body, nil, &ar)
	return req, err
}

// encodeLikeControllerRuntime is admission.Webhook.ServeHTTP's encode.
func encodeLikeControllerRuntime(resp cradmission.Response) ([]byte, error) {
	ar := admissionv1.AdmissionReview{Response: &resp.AdmissionResponse}
	ar.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"))
	var buf bytes.Buffer
	err := json.NewEncoder(&buf).Encode(ar)
	return buf.Bytes(), err
}

// mpiJobScheme registers mpi-operator's v2beta1 MPIJob for version. The
// training-operator's v1 types are not a dependency, so a v1 MPIJob is read
// into the v2beta1 type: they agree on every field of the testdata jobs.
func mpiJobScheme(version string) *runtime.Scheme {
	scheme := runtime.NewScheme()
	gvk := schema.GroupVersionKind{Group: "kubeflow.org", Version: version, Kind: "MPIJob"}
	scheme.AddKnownTypeWithName(gvk, &kubeflowv2beta1.MPIJob{})
	return scheme
}

// workerCommandDefaulter is the webhook's mutation written as a kubebuilder
// Defaulter, on the typed MPIJob: mutate.WorkerCommand finds the command, as
// the webhook's does, and the Defaulter sets it on the worker container.
type workerCommandDefaulter struct{ opts mutate.Options }

func (d workerCommandDefaulter) Default(ctx context.Context, job *kubeflowv2beta1.MPIJob) error {
	if !d.opts.FlyteTaskSelector.Matches(labels.Set(job.Labels)) {
		return nil // not a Flyte task: leave it
	}
	worker := job.Spec.MPIReplicaSpecs[kubeflowv2beta1.MPIReplicaTypeWorker]
	view := &mutate.Job{Metadata: mutate.Metadata{Labels: job.Labels, Annotations: job.Annotations}}
	if worker != nil {
		view.Spec.MPIReplicaSpecs.Worker = &mutate.ReplicaSpec{}
		view.Spec.MPIReplicaSpecs.Worker.Template.Metadata.Annotations = worker.Template.Annotations
	}
	command, source, err := mutate.WorkerCommand(view, d.opts)
	if err != nil || len(command) == 0 || worker == nil || len(worker.Template.Spec.Containers) == 0 {
		return err
	}
	containers := worker.Template.Spec.Containers
	i := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == d.opts.ContainerName })
	c := &containers[max(i, 0)]
	if slices.Equal(c.Command, command) && len(c.Args) == 0 {
		return nil // already runs the worker command
	}
	c.Command, c.Args = command, nil
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[mutate.AnnotationWorkerCommandSource] = string(source)
	logDefaulted(logf.FromContext(ctx), c.Name, source)
	return nil
}

// logDefaulted logs the line the webhook logs for a mutation, so that both
// paths pay for one.
func logDefaulted(log logr.Logger, container string, source mutate.Source) {
	log.Info("decision", "outcome", mutate.OutcomeMutated, "source", source, "container", container)
}
