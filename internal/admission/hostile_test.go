package admission

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/truncate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// updateGolden rewrites the golden files instead of comparing with them.
var updateGolden = flag.Bool("update", os.Getenv("UPDATE_GOLDEN") != "", "rewrite golden files")

// hostileInputsDoc is the documented outcome of every input in TestHostileInputs.
var hostileInputsDoc = filepath.Join("..", "..", "docs", "hostile-inputs.md")

// hostileInput is a request of TestHostileInputs: POST and application/json unless it says otherwise.
type hostileInput struct {
	input       string
	method      string
	contentType string
	body        []byte
}

// request is in as the API server would send it.
func (in hostileInput) request() *http.Request {
	method, contentType := in.method, in.contentType
	if method == "" {
		method = http.MethodPost
	}
	if contentType == "" {
		contentType = "application/json"
	}
	req := httptest.NewRequest(method, Path, bytes.NewReader(in.body))
	req.Header.Set("Content-Type", contentType)
	return req
}

// hostileInputs are the broken and hostile requests of TestHostileInputs.
func hostileInputs(t testing.TB) []hostileInput {
	worker := func(edit func(worker map[string]any)) func(map[string]any) {
		return func(job map[string]any) {
			edit(job["spec"].(map[string]any)["mpiReplicaSpecs"].(map[string]any)["Worker"].(map[string]any))
		}
	}
	containers := func(value any) func(map[string]any) {
		return worker(func(w map[string]any) { w["template"].(map[string]any)["spec"].(map[string]any)["containers"] = value })
	}
	both := func(edits ...func(map[string]any)) func(map[string]any) {
		return func(job map[string]any) {
			for _, e := range edits {
				e(job)
			}
		}
	}
	custom := func(v string) func(map[string]any) { return annotate(mutate.AnnotationTaskCustom, v) }
	flyteReview := func(edit func(map[string]any)) []byte {
		return reviewOf(t, "v1", "CREATE", sampleJob(t, "v1", edit))
	}
	valid := flyteReview(custom(flytekitCustom))
	review := func(request string) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"` + request + `}`)
	}
	padded := func(n int) string { // the flytekit custom padded with blanks to n bytes
		return flytekitCustom[:len(flytekitCustom)-1] + strings.Repeat(" ", n-len(flytekitCustom)) + "}"
	}
	sidecarNamedMPI := map[string]any{"name": "mpi", "image": "envoy", "args": []any{"proxy"}}

	return []hostileInput{
		// The HTTP request itself.
		{input: "Content-Type text/plain", contentType: "text/plain", body: valid},
		{input: "Content-Type application/json; charset=utf-8", contentType: "application/json; charset=utf-8", body: valid},
		// The AdmissionReview.
		{input: "not JSON", body: []byte("<AdmissionReview/>")},
		{input: "an empty body", body: []byte{}},
		{input: "JSON, but a list", body: []byte("[]")},
		{input: "JSON nested 20,000 deep", body: []byte(strings.Repeat("[", 20000) + strings.Repeat("]", 20000))},
		{input: "a review followed by garbage", body: append(append([]byte{}, valid...), "}{"...)},
		{input: "an admission.k8s.io/v1beta1 review", body: []byte(strings.Replace(string(valid), "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1))},
		{input: "a ConversionReview", body: []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}`)},
		{input: "a review without a request", body: review(``)},
		{input: "a null request", body: review(`,"request":null`)},
		{input: "a request without a uid", body: review(`,"request":{"operation":"CREATE"}`)},
		{input: "a uid that is a number", body: review(`,"request":{"uid":7}`)},
		// The request.
		{input: "the reference: a Flyte Horovod MPIJob with the task-custom annotation", body: valid},
		{input: "an UPDATE", body: reviewOf(t, "v1", "UPDATE", sampleJob(t, "v1", custom(flytekitCustom)))},
		{input: "a lower-case operation \"create\"", body: reviewOf(t, "v1", "create", sampleJob(t, "v1", custom(flytekitCustom)))},
		{input: "a request for a Pod", body: []byte(strings.Replace(string(valid), `"kind":"MPIJob"`, `"kind":"Pod"`, 1))},
		{input: "a request for MPIJob v1alpha2", body: []byte(strings.Replace(string(valid), `"version":"v1"`, `"version":"v1alpha2"`, 1))},
		{input: "a request for the status subresource", body: reviewOf(t, "v1", "CREATE", sampleJob(t, "v1", custom(flytekitCustom)), fixtures.SubResource("status"))},
		{input: "a request for another resource of kind MPIJob", body: reviewOf(t, "v1", "CREATE", sampleJob(t, "v1", custom(flytekitCustom)),
			fixtures.Resource(metav1.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "mpijobcopies"}))},
		{input: "a null object", body: reviewOf(t, "v1", "CREATE", []byte("null"))},
		{input: "an object of another kind than the request's", body: reviewOf(t, "v1", "CREATE", []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"labels":{"execution-id":"e","task-name":"t"}}}`))},
		{input: "worker containers that are a string", body: flyteReview(both(custom(flytekitCustom), containers("mpi")))},
		{input: "an annotation that is a number", body: flyteReview(annotate("flyte.org/retries", 3))},
		{input: "a job without Flyte labels, with a garbage annotation", body: flyteReview(both(custom("garbage"), func(j map[string]any) { delete(j["metadata"].(map[string]any), "labels") }))},
		// The annotations.
		{input: "task-custom: invalid JSON", body: flyteReview(custom(`{"workerReplicas":`))},
		{input: "task-custom: a command that is a string", body: flyteReview(custom(`{"workerReplicas":{"command":"/usr/sbin/sshd -De"}}`))},
		{input: "task-custom: replicas that is a word", body: flyteReview(custom(`{"workerReplicas":{"replicas":"two","command":["sshd"]}}`))},
		{input: "task-custom: workerReplicas that is a list", body: flyteReview(custom(`{"workerReplicas":[]}`))},
		{input: "task-custom: fields flyteidl v1.5.22 does not know", body: flyteReview(custom(`{"workerReplicas":{"common":{"replicas":2},"command":["/usr/sbin/sshd","-De"]},"newTopLevel":{"a":[1]}}`))},
		{input: "task-custom: JSON nested 5,000 deep", body: flyteReview(custom(`{"x":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`))},
		{input: "task-custom: exactly 64 KiB", body: flyteReview(custom(padded(mutate.MaxAnnotationBytes)))},
		{input: "task-custom: 64 KiB + 1 byte", body: flyteReview(custom(padded(mutate.MaxAnnotationBytes + 1)))},
		{input: "task-custom: invalid base64", body: flyteReview(custom("c3NoZA=!"))},
		{input: "task-custom: base64 protobuf of fields no task custom has", body: flyteReview(custom("KAE="))},
		{input: "task-custom: JSON after a UTF-8 byte order mark", body: flyteReview(custom("\ufeff" + flytekitCustom))},
		{input: "task-custom: base64 of garbage protobuf", body: flyteReview(custom(base64.StdEncoding.EncodeToString([]byte{0x0a, 0xff, 0xff, 0xff})))},
		{input: "task-custom: an empty string", body: flyteReview(custom(""))},
		{input: "task-custom: an empty command", body: flyteReview(custom(`{"workerReplicas":{"command":[]}}`))},
		{input: "task-custom: an empty program name", body: flyteReview(custom(`{"workerReplicas":{"command":["","-De"]}}`))},
		{input: "task-custom: empty strings after the program", body: flyteReview(custom(`{"workerReplicas":{"command":["/usr/sbin/sshd","",""]}}`))},
		{input: "task-custom: a NUL byte in the command", body: flyteReview(custom(`{"workerReplicas":{"command":["/usr/sbin/sshd","-f\u0000/etc/passwd"]}}`))},
		{input: "task-custom: a 60,000-byte word in the command", body: flyteReview(custom(`{"workerReplicas":{"command":["/usr/sbin/sshd","` + strings.Repeat("x", 60000) + `"]}}`))},
		{input: "task-type-version: \"7\"", body: flyteReview(both(custom(flytekitCustom), annotate(mutate.AnnotationTaskTypeVersion, "7")))},
		{input: "worker-spec-command: a shell operator", body: flyteReview(annotate(mutate.AnnotationWorkerSpecCommand, "/usr/sbin/sshd -De && rm -rf /"))},
		{input: "worker-spec-command: an unterminated quote", body: flyteReview(annotate(mutate.AnnotationWorkerSpecCommand, "/usr/sbin/sshd -f '/home"))},
		{input: "worker-spec-command: only blanks", body: flyteReview(annotate(mutate.AnnotationWorkerSpecCommand, " \t "))},
		{input: "worker-spec-command: a comment", body: flyteReview(annotate(mutate.AnnotationWorkerSpecCommand, "/usr/sbin/sshd -De # -f /etc/ssh/sshd_config"))},
		{input: "worker-spec-command: a line continuation", body: flyteReview(annotate(mutate.AnnotationWorkerSpecCommand, "/usr/sbin/sshd \\\n -De"))},
		{input: "worker-spec-command: a redirection", body: flyteReview(annotate(mutate.AnnotationWorkerSpecCommand, "/usr/sbin/sshd -De 2>&1"))},
		// The job's shape.
		{input: "no Worker replica", body: flyteReview(both(custom(flytekitCustom), func(j map[string]any) {
			delete(j["spec"].(map[string]any)["mpiReplicaSpecs"].(map[string]any), "Worker")
		}))},
		{input: "Worker containers empty", body: flyteReview(both(custom(flytekitCustom), containers([]any{})))},
		{input: "Worker containers null", body: flyteReview(both(custom(flytekitCustom), containers(nil)))},
		{input: "two Worker containers named mpi", body: flyteReview(both(custom(flytekitCustom), worker(func(w map[string]any) {
			spec := w["template"].(map[string]any)["spec"].(map[string]any)
			spec["containers"] = append(spec["containers"].([]any), sidecarNamedMPI)
		})))},
		{input: "a sidecar before the mpi container", body: flyteReview(both(custom(flytekitCustom), worker(func(w map[string]any) {
			spec := w["template"].(map[string]any)["spec"].(map[string]any)
			spec["containers"] = append([]any{map[string]any{"name": "log-shipper", "image": "fluent-bit", "args": []any{"-c", "/etc/fluent-bit.conf"}}}, spec["containers"].([]any)...)
		})))},
		// What Flyte itself declared.
		{input: "a Flyte-built job with Worker(command=sshd), no annotation", body: reviewOf(t, "v1", "CREATE", flyteObject(t, "v1", "horovod-worker-command"))},
		{input: "a Flyte-built job with only Launcher(command=...)", body: reviewOf(t, "v1", "CREATE", flyteObject(t, "v1", "horovod-launcher-command"))},
		{input: "a Flyte-built job with Worker(command=sshd) and no Launcher", body: reviewOf(t, "v1", "CREATE", flyteObject(t, "v1", "horovod-worker-command",
			func(j map[string]any) {
				delete(j["spec"].(map[string]any)["mpiReplicaSpecs"].(map[string]any), "Launcher")
			}))},
	}
}

// TestHostileInputs sends broken and hostile requests through the HTTP
// handler. What it answers to each is documented in docs/hostile-inputs.md,
// which this test renders: `make golden` (UPDATE_GOLDEN=1) rewrites it, and
// the test fails when the handler's answers and the document differ.
func TestHostileInputs(t *testing.T) {
	cases := hostileInputs(t)
	if len(cases) < 30 {
		t.Fatalf("only %d hostile inputs; the page promises 30 at least", len(cases))
	}

	var doc strings.Builder
	doc.WriteString("# What the webhook answers to broken and hostile input\n\n" +
		"Generated by `TestHostileInputs` in internal/admission (`make golden` rewrites it; the test fails when\n" +
		"the handler's answers differ from this page). Every request goes through the HTTP handler as the API\n" +
		"server would send it. Most rows start from testdata/flyte/v1/horovod-no-worker-command.yaml, built by Flyte's own\n" +
		"backend for a Horovod task that declares no worker command (its worker carries the launcher's args), and add or\n" +
		"change what they name. The reference adds the annotation `mpi.flyte.org/task-custom`, the custom of the same task\n" +
		"declaring `Worker(command=[\"/bin/sh\", \"-c\", \"mkdir -p /tmp/scratch && exec sleep infinity\"])`: so it is patched,\n" +
		"with source `task-custom`.\n\n" +
		"| # | input | HTTP | answer | message or warning |\n|---|---|---|---|---|\n")
	for i, tc := range cases {
		rec := httptest.NewRecorder()
		newHandler().ServeHTTP(rec, tc.request())
		if rec.Code >= 500 {
			t.Errorf("%s: status %d", tc.input, rec.Code)
		}
		answer, message := describeAnswer(t, rec)
		fmt.Fprintf(&doc, "| %d | %s | %d | %s | %s |\n", i+1, tc.input, rec.Code, answer, markdownCell(message))
	}

	if *updateGolden {
		if err := os.WriteFile(hostileInputsDoc, []byte(doc.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(hostileInputsDoc)
	if err != nil {
		t.Fatalf("%v (run `make golden` to write it)", err)
	}
	if diff := cmp.Diff(string(want), doc.String()); diff != "" {
		t.Errorf("the handler's answers differ from %s (-documented +actual); if intended, run `make golden`:\n%s",
			hostileInputsDoc, diff)
	}
}

// describeAnswer sums up a response in a few words, and its message or warnings.
func describeAnswer(t *testing.T, rec *httptest.ResponseRecorder) (answer, message string) {
	t.Helper()
	if rec.Code != http.StatusOK {
		return "no review", strings.TrimSpace(rec.Body.String())
	}
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &rev); err != nil || rev.Response == nil {
		t.Fatalf("a 200 without a review: %s", rec.Body)
	}
	resp := rev.Response
	switch {
	case !resp.Allowed:
		answer, message = fmt.Sprintf("denied, %d %s", resp.Result.Code, resp.Result.Reason), resp.Result.Message
	case len(resp.Patch) > 0:
		var ops []map[string]any
		if err := json.Unmarshal(resp.Patch, &ops); err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, op := range ops {
			path := strings.TrimPrefix(fmt.Sprint(op["path"]), "/spec/mpiReplicaSpecs/Worker/template/spec")
			if source, ok := op["value"].(string); ok && strings.HasPrefix(path, "/metadata/annotations/") {
				path += " = " + source // the source annotation: where the command came from
			}
			paths = append(paths, fmt.Sprint(op["op"], " ", path))
		}
		answer = "patched: " + strings.Join(paths, ", ")
	default:
		answer = "allowed unchanged"
	}
	if len(resp.Warnings) > 0 {
		message = strings.TrimSpace(message + " warning: " + strings.Join(resp.Warnings, "; "))
	}
	return answer, message
}

// markdownCell keeps a message on one table row, and short.
func markdownCell(s string) string {
	const max = 300
	// protobuf's errors vary their spaces on purpose; the page must not
	s = strings.NewReplacer("|", `\|`, "\n", " ", "\u00a0", " ").Replace(s)
	return truncate.String(s, max)
}
