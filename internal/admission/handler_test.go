package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	kubeflowv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

var (
	flytekitCustom = fixtures.FlytekitCustom // declares workerCommand
	workerCommand  = fixtures.WorkerCommand
	sshd           = fixtures.SSHD // what testdata's tasks declare
)

// flyteJobName is the Flyte-built job the tests start from: a Horovod task
// that declares no worker command, so that its worker copies the launcher.
const flyteJobName = "horovod-no-worker-command"

// flyteObject returns the Flyte-built MPIJob testdata/flyte/VERSION/NAME.yaml
// as JSON, with edits applied to it.
func flyteObject(t testing.TB, version, name string, edits ...func(job map[string]any)) []byte {
	t.Helper()
	job, err := fixtures.FlyteJob(version, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range edits {
		edit(job.Object)
	}
	return fixtures.MustJSON(job)
}

// sampleJob is flyteObject of the job flyteJobName.
func sampleJob(t testing.TB, version string, edit func(job map[string]any)) []byte {
	t.Helper()
	if edit == nil {
		return flyteObject(t, version, flyteJobName)
	}
	return flyteObject(t, version, flyteJobName, edit)
}

// annotate sets an annotation on the MPIJob.
func annotate(key string, value any) func(map[string]any) {
	return func(job map[string]any) {
		metadata := job["metadata"].(map[string]any)
		if metadata["annotations"] == nil {
			metadata["annotations"] = map[string]any{}
		}
		metadata["annotations"].(map[string]any)[key] = value
	}
}

// reviewOf wraps an object into the AdmissionReview the API server sends for operation on it.
func reviewOf(_ testing.TB, version, operation string, object []byte, opts ...fixtures.ReviewOption) []byte {
	return fixtures.Review(object, fixtures.MPIJob(version), admissionv1.Operation(operation), opts...)
}

// responseTo posts body to h as the API server does, and returns the response.
func responseTo(t testing.TB, h http.Handler, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := post(h, body)
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &rev); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusOK || rev.APIVersion != "admission.k8s.io/v1" || rev.Kind != "AdmissionReview" || rev.Response == nil {
		t.Fatalf("not an AdmissionReview response: %d %s", rec.Code, rec.Body)
	}
	if rev.Response.UID != fixtures.ReviewUID {
		t.Fatalf("uid %q not echoed", rev.Response.UID)
	}
	return rev.Response
}

// post sends body to h as the API server sends a review.
func post(h http.Handler, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func applyPatch(t testing.TB, object []byte, resp *admissionv1.AdmissionResponse) []byte {
	t.Helper()
	if len(resp.Patch) == 0 {
		return object
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply(object)
	if err != nil {
		t.Fatalf("the patch does not apply: %v\n%s", err, resp.Patch)
	}
	return out
}

// newHandler is the webhook with the default options.
func newHandler() *Handler {
	return NewHandler(mutate.DefaultOptions(), DefaultLimits(), nil)
}

// TestAdmitFlyteHorovodJob runs Flyte's own MPIJobs through the handler and
// checks the patched object field by field: the worker container runs the
// command the annotation declares, and nothing else differs.
func TestAdmitFlyteHorovodJob(t *testing.T) {
	for _, version := range []string{"v1", "v2beta1"} {
		t.Run(version, func(t *testing.T) {
			object := sampleJob(t, version, annotate(mutate.AnnotationTaskCustom, flytekitCustom))
			resp := responseTo(t, newHandler(), reviewOf(t, version, "CREATE", object))
			if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
				t.Fatalf("want an allowed JSON patch, got %+v", resp)
			}
			patched := applyPatch(t, object, resp)

			var before, after map[string]any
			if err := json.Unmarshal(object, &before); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(patched, &after); err != nil {
				t.Fatal(err)
			}
			worker := after["spec"].(map[string]any)["mpiReplicaSpecs"].(map[string]any)["Worker"].(map[string]any)
			container := worker["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			if diff := cmp.Diff([]any{"/bin/sh", "-c", "mkdir -p /tmp/scratch && exec sleep infinity"}, container["command"]); diff != "" {
				t.Errorf("worker command (-want +got):\n%s", diff)
			}
			// Put back what the patch may change; everything else must be as it was.
			container["args"] = before["spec"].(map[string]any)["mpiReplicaSpecs"].(map[string]any)["Worker"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["args"]
			delete(container, "command")
			annotations := after["metadata"].(map[string]any)["annotations"].(map[string]any)
			if got := annotations[mutate.AnnotationWorkerCommandSource]; got != "task-custom" {
				t.Errorf("source annotation = %v, want task-custom", got)
			}
			delete(annotations, mutate.AnnotationWorkerCommandSource)
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("the patch changed more than the worker command (-before +after):\n%s", diff)
			}

			// The mutation is idempotent: a reinvocation changes nothing.
			again := responseTo(t, newHandler(), reviewOf(t, version, "CREATE", patched))
			if !again.Allowed || len(again.Patch) != 0 {
				t.Errorf("reinvocation: want allowed without a patch, got %+v", again)
			}
		})
	}
}

// TestPatchFitsMPIOperatorTypes checks the patch's paths against mpi-operator's
// own Go types, so that a path typo cannot pass as a mutation.
func TestPatchFitsMPIOperatorTypes(t *testing.T) {
	object := sampleJob(t, "v2beta1", annotate(mutate.AnnotationTaskCustom, flytekitCustom))
	patched := applyPatch(t, object, responseTo(t, newHandler(), reviewOf(t, "v2beta1", "CREATE", object)))
	var job kubeflowv2beta1.MPIJob
	if err := json.Unmarshal(patched, &job); err != nil {
		t.Fatal(err)
	}
	worker := job.Spec.MPIReplicaSpecs[kubeflowv2beta1.MPIReplicaTypeWorker].Template.Spec.Containers[0]
	if diff := cmp.Diff(workerCommand, worker.Command); diff != "" || worker.Args != nil {
		t.Errorf("worker command (-want +got):\n%s\nargs: %q", diff, worker.Args)
	}
	launcher := job.Spec.MPIReplicaSpecs[kubeflowv2beta1.MPIReplicaTypeLauncher].Template.Spec.Containers[0]
	if launcher.Command != nil || len(launcher.Args) == 0 || launcher.Args[0] != "horovodrun" {
		t.Errorf("launcher changed: command %q args %q", launcher.Command, launcher.Args)
	}
	if got := job.Annotations[mutate.AnnotationWorkerCommandSource]; got != "task-custom" {
		t.Errorf("source annotation = %q", got)
	}
}

// TestAdmitFlyteBuiltJobs runs every MPIJob that Flyte's own backend built
// (testdata/flyte, `make testdata`) through the handler: a task that declares
// a worker command, or carries the annotation, gets a worker that runs sshd
// and nothing else changes; any other job is left as Flyte made it.
func TestAdmitFlyteBuiltJobs(t *testing.T) {
	for _, version := range []string{"v1", "v2beta1"} {
		names, err := fixtures.FlyteJobNames(version)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(slices.Sorted(slices.Values(fixtures.FlyteJobs)), names); diff != "" {
			t.Fatalf("testdata/flyte/%s holds other jobs than this test expects (-want +got):\n%s", version, diff)
		}
		for _, name := range names {
			t.Run(version+"/"+name, func(t *testing.T) {
				object := flyteObject(t, version, name)
				resp := responseTo(t, newHandler(), reviewOf(t, version, "CREATE", object))
				if !resp.Allowed {
					t.Fatalf("denied: %v", resp.Result)
				}
				expected, _ := fixtures.FlyteExpected(fixtures.NewestFlyteRelease, name)
				want := mutate.Source(expected.Webhook)
				if want == mutate.SourceNone {
					if len(resp.Patch) > 0 {
						t.Fatalf("patched %s; want the job left as Flyte made it", resp.Patch)
					}
					return
				}
				patched := applyPatch(t, object, resp)
				checkOnlyWorkerCommandChanged(t, object, patched)
				var job mutate.Job
				if err := json.Unmarshal(patched, &job); err != nil {
					t.Fatal(err)
				}
				worker := job.Spec.MPIReplicaSpecs.Worker.Template.Spec.Containers[0]
				if diff := cmp.Diff(&sshd, worker.Command); diff != "" || worker.Args != nil {
					t.Errorf("worker command (-want +got):\n%s\nargs: %v", diff, worker.Args)
				}
				if got := job.Metadata.Annotations[mutate.AnnotationWorkerCommandSource]; got != string(want) {
					t.Errorf("source annotation %q, want %q", got, want)
				}
				if again := responseTo(t, newHandler(), reviewOf(t, version, "CREATE", patched)); len(again.Patch) > 0 {
					t.Errorf("reinvocation patched again: %s", again.Patch)
				}
			})
		}
	}
}

// annotateWorker sets an annotation on the Worker's pod template.
func annotateWorker(key string, value any) func(map[string]any) {
	return func(job map[string]any) {
		worker := job["spec"].(map[string]any)["mpiReplicaSpecs"].(map[string]any)["Worker"].(map[string]any)
		template := worker["template"].(map[string]any)
		if template["metadata"] == nil {
			template["metadata"] = map[string]any{}
		}
		annotate(key, value)(template)
	}
}

// TestDenyInvalidAnnotation checks the denial of an invalid annotation: 422
// Invalid, which flytepropeller fails at once as BadTaskFormat rather than
// retrying, with the annotation as the cause's field where Decide read it.
func TestDenyInvalidAnnotation(t *testing.T) {
	const message = "invalid JSON: unexpected end of JSON input"
	workerPath := "spec.mpiReplicaSpecs.Worker.template.metadata.annotations[mpi.flyte.org/task-custom]"
	cases := []struct {
		name  string
		edits []func(map[string]any)
		field string
	}{
		{"on the MPIJob", []func(map[string]any){annotate(mutate.AnnotationTaskCustom, "{")},
			"metadata.annotations[mpi.flyte.org/task-custom]"},
		{"on the Worker's pod template", []func(map[string]any){annotateWorker(mutate.AnnotationTaskCustom, "{")}, workerPath},
		{"on both: the MPIJob's is read", []func(map[string]any){
			annotate(mutate.AnnotationTaskCustom, "{"), annotateWorker(mutate.AnnotationTaskCustom, flytekitCustom),
		}, "metadata.annotations[mpi.flyte.org/task-custom]"},
	}
	for _, version := range []string{"v1", "v2beta1"} {
		for _, tc := range cases {
			t.Run(version+"/"+tc.name, func(t *testing.T) {
				resp := responseTo(t, newHandler(), reviewOf(t, version, "CREATE", flyteObject(t, version, flyteJobName, tc.edits...)))
				want := &metav1.Status{
					Status:  metav1.StatusFailure,
					Code:    http.StatusUnprocessableEntity,
					Reason:  metav1.StatusReasonInvalid,
					Message: "mpi.flyte.org/task-custom: " + message,
					Details: &metav1.StatusDetails{Group: "kubeflow.org", Kind: "MPIJob", Name: "f3a1b2c4d5e6g7h8i9j0-n0-0", Causes: []metav1.StatusCause{{
						Type: metav1.CauseTypeFieldValueInvalid, Field: tc.field, Message: message,
					}}},
				}
				if resp.Allowed || len(resp.Patch) > 0 {
					t.Errorf("allowed %t with patch %s; want a denial", resp.Allowed, resp.Patch)
				}
				if diff := cmp.Diff(want, resp.Result); diff != "" {
					t.Errorf("result (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestDecisionMetric checks what flyte_mpi_webhook_decisions_total counts:
// each review once, by outcome and source, a review without an object as
// malformed, never as a denial, and a body that is no review not at all:
// admission.Webhook answers it before any decision.
func TestDecisionMetric(t *testing.T) {
	h := newHandler()
	serve := func(method string, body []byte) {
		req := httptest.NewRequest(method, Path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	declared := reviewOf(t, "v1", "CREATE", flyteObject(t, "v1", "horovod-worker-command"))
	cases := []struct {
		name           string
		send           func()
		outcome        string
		source         string
		wantIncrements float64
	}{
		{"a declared worker command", func() { serve(http.MethodPost, declared) }, "mutated", "flyte-worker-args", 1},
		{"an annotated job", func() {
			serve(http.MethodPost, reviewOf(t, "v2beta1", "CREATE", sampleJob(t, "v2beta1", annotate(mutate.AnnotationTaskCustom, flytekitCustom))))
		}, "mutated", "task-custom", 1},
		{"a job without a worker command", func() { serve(http.MethodPost, reviewOf(t, "v1", "CREATE", sampleJob(t, "v1", nil))) }, "unchanged", "none", 1},
		{"an invalid annotation", func() {
			serve(http.MethodPost, reviewOf(t, "v1", "CREATE", sampleJob(t, "v1", annotate(mutate.AnnotationTaskCustom, "{"))))
		}, "denied_invalid", "none", 1},
		{"an update", func() { serve(http.MethodPost, reviewOf(t, "v1", "UPDATE", sampleJob(t, "v1", nil))) }, "skipped_not_flyte", "none", 1},
		{"a GET", func() { serve(http.MethodGet, nil) }, "malformed", "none", 0},
		{"not JSON", func() { serve(http.MethodPost, []byte("<x/>")) }, "malformed", "none", 0},
		{"a review without an object", func() { serve(http.MethodPost, reviewOf(t, "v1", "CREATE", []byte("null"))) }, "malformed", "none", 1},
		{"three reviews", func() {
			for range 3 {
				serve(http.MethodPost, declared)
			}
		}, "mutated", "flyte-worker-args", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			counter := decisionsTotal.WithLabelValues(tc.outcome, tc.source)
			before, deniedBefore := testutil.ToFloat64(counter), testutil.ToFloat64(decisionsTotal.WithLabelValues("denied_invalid", "none"))
			tc.send()
			if got := testutil.ToFloat64(counter) - before; got != tc.wantIncrements {
				t.Errorf("%s{outcome=%q,source=%q} grew by %v, want %v", "flyte_mpi_webhook_decisions_total", tc.outcome, tc.source, got, tc.wantIncrements)
			}
			if tc.outcome == "malformed" && testutil.ToFloat64(decisionsTotal.WithLabelValues("denied_invalid", "none")) != deniedBefore {
				t.Errorf("a malformed request was counted as denied_invalid")
			}
		})
	}
}

// TestPatchCarriesArgsUnescaped checks that the patch writes worker args as
// they are: an encoder that escapes HTML writes each of '<', '>' and '&' as
// six bytes, which made a 3 MiB review's answer 25 MB.
func TestPatchCarriesArgsUnescaped(t *testing.T) {
	args := strings.Repeat("<>&", 100<<10)
	object := flyteObject(t, "v1", "horovod-worker-command", func(job map[string]any) {
		worker := job["spec"].(map[string]any)["mpiReplicaSpecs"].(map[string]any)["Worker"].(map[string]any)
		worker["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["args"] = []any{"/usr/sbin/sshd", args}
	})
	body := reviewOf(t, "v1", "CREATE", object)
	rec := post(newHandler(), body)
	resp := responseTo(t, newHandler(), body)
	if !bytes.Contains(resp.Patch, []byte(`"`+args+`"`)) {
		t.Errorf("the patch does not carry the args as they are: %.200s…", resp.Patch)
	}
	// The patch travels in base64, 4/3 of its size.
	if max := 3*len(body)/2 + 4<<10; rec.Body.Len() > max {
		t.Errorf("the answer is %d bytes for a review of %d; want at most %d", rec.Body.Len(), len(body), max)
	}
}
