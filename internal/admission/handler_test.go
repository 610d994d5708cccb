package admission

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	kubeflowv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

const flytekitCustom = `{"workerReplicas":{"replicas":2,"resources":{},"command":["/usr/sbin/sshd","-De","-f","/home/jobuser/.sshd_config"]},"launcherReplicas":{"replicas":1,"resources":{}},"runPolicy":{},"slots":1}`

var sshd = []string{"/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"}

// sampleJob returns testdata/mpijob-VERSION.yaml as JSON, with edit applied to it.
func sampleJob(t testing.TB, version string, edit func(job map[string]any)) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "mpijob-"+version+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var job map[string]any
	if err := yaml.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(job)
	}
	out, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func annotate(key string, value any) func(map[string]any) {
	return func(job map[string]any) {
		job["metadata"].(map[string]any)["annotations"].(map[string]any)[key] = value
	}
}

// reviewOf wraps an object into the AdmissionReview the API server sends for its creation.
func reviewOf(t testing.TB, version, operation string, object []byte) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid":       "705ab4f5-6393-11e8-b7cc-42010a800002",
			"kind":      map[string]string{"group": "kubeflow.org", "version": version, "kind": "MPIJob"},
			"resource":  map[string]string{"group": "kubeflow.org", "version": version, "resource": "mpijobs"},
			"namespace": "flytesnacks-development",
			"operation": operation,
			"userInfo":  map[string]any{"username": "system:serviceaccount:flyte:flytepropeller"},
			"object":    json.RawMessage(object),
			"dryRun":    false,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func admit(t testing.TB, h *Handler, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	out, err := h.Admit(context.Background(), body)
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &rev); err != nil {
		t.Fatal(err)
	}
	if rev.APIVersion != "admission.k8s.io/v1" || rev.Kind != "AdmissionReview" || rev.Response == nil {
		t.Fatalf("not an AdmissionReview response: %s", out)
	}
	if rev.Response.UID != "705ab4f5-6393-11e8-b7cc-42010a800002" {
		t.Fatalf("uid %q not echoed", rev.Response.UID)
	}
	return rev.Response
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

func newHandler() *Handler { return &Handler{Options: mutate.DefaultOptions()} }

// TestAdmitFlyteHorovodJob runs Flyte's own MPIJobs through the handler and
// checks the patched object field by field: the worker container runs sshd,
// and nothing else differs.
func TestAdmitFlyteHorovodJob(t *testing.T) {
	for _, version := range []string{"v1", "v2beta1"} {
		t.Run(version, func(t *testing.T) {
			object := sampleJob(t, version, annotate(mutate.AnnotationTaskCustom, flytekitCustom))
			resp := admit(t, newHandler(), reviewOf(t, version, "CREATE", object))
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
			if diff := cmp.Diff([]any{"/usr/sbin/sshd", "-De", "-f", "/home/jobuser/.sshd_config"}, container["command"]); diff != "" {
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
			again := admit(t, newHandler(), reviewOf(t, version, "CREATE", patched))
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
	patched := applyPatch(t, object, admit(t, newHandler(), reviewOf(t, "v2beta1", "CREATE", object)))
	var job kubeflowv2beta1.MPIJob
	if err := json.Unmarshal(patched, &job); err != nil {
		t.Fatal(err)
	}
	worker := job.Spec.MPIReplicaSpecs[kubeflowv2beta1.MPIReplicaTypeWorker].Template.Spec.Containers[0]
	if diff := cmp.Diff(sshd, worker.Command); diff != "" || worker.Args != nil {
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

// TestServeHTTPBodyLimitWithoutLength checks that a body of unknown length is cut at the limit.
func TestServeHTTPBodyLimitWithoutLength(t *testing.T) {
	body := strings.NewReader(`{"x":"` + strings.Repeat("a", MaxRequestBytes) + `"}`)
	req := httptest.NewRequest(http.MethodPost, Path, struct{ *strings.Reader }{body}) // hides the length
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	newHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413: %s", rec.Code, rec.Body)
	}
	if unread := body.Len(); unread == 0 {
		t.Errorf("the whole body was read")
	}
}
