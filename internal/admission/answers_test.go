package admission

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// TestAnswersAsWebhook holds the review's path, which the webhook owns, to
// controller-runtime's admission.Webhook, the reference: Handler answers
// every hostile input, every job Flyte's backend built, and what breaks the
// reading of a body or the decision, byte for byte as the Webhook answers
// them around the same decision; and it reads the jobs in one pass, not
// through the codec.
func TestAnswersAsWebhook(t *testing.T) {
	inputs := hostileInputs(t)
	var onePass []string // the inputs that must not go to the codec
	for _, in := range flyteBuiltInputs(t) {
		inputs = append(inputs, in)
		onePass = append(onePass, in.input)
	}
	valid := reviewOf(t, "v1", "CREATE", sampleJob(t, "v1", annotate(mutate.AnnotationTaskCustom, flytekitCustom)))
	onePass = append(onePass, "a Flyte Horovod MPIJob (the reference)")

	for _, in := range inputs {
		t.Run(in.input, func(t *testing.T) {
			h := newHandler()
			if _, err := decodeReview(in.body, h.jobs); err != nil && slices.Contains(onePass, in.input) {
				t.Errorf("decodeReview: %v; want it to read the review", err)
			}
			compareAnswers(t, h, in.request)
		})
	}

	t.Run("a decision that panics", func(t *testing.T) {
		panicking := NewHandler(mutate.DefaultOptions(), DefaultLimits(), func(mutate.Decision) { panic("observed") })
		rec := compareAnswers(t, panicking, hostileInput{body: valid}.request)
		if !bytes.Contains(rec.Body.Bytes(), []byte(`"code":500`)) {
			t.Errorf("not a 500 review: %s", rec.Body)
		}
	})
}

// compareAnswers serves the request that newRequest makes with h and with
// controller-runtime's admission.Webhook around h's decision, and fails
// unless the answers are equal; it returns h's.
func compareAnswers(t *testing.T, h *Handler, newRequest func() *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	got, want := httptest.NewRecorder(), httptest.NewRecorder()
	h.ServeHTTP(got, newRequest())
	reference := &ctrladmission.Webhook{Handler: ctrladmission.HandlerFunc(func(_ context.Context, req ctrladmission.Request) ctrladmission.Response {
		job, err := decodeObject(&req.AdmissionRequest, h.jobs)
		return ctrladmission.Response{AdmissionResponse: h.respond(&req.AdmissionRequest, job, err)}
	})}
	reference.ServeHTTP(want, newRequest())
	if got.Code != want.Code {
		t.Errorf("status %d, the Webhook's %d", got.Code, want.Code)
	}
	if diff := cmp.Diff(want.Header(), got.Header()); diff != "" {
		t.Errorf("headers (-Webhook +Handler):\n%s", diff)
	}
	if diff := cmp.Diff(want.Body.String(), got.Body.String()); diff != "" {
		t.Errorf("body (-Webhook +Handler):\n%s", diff)
	}
	return got
}

// flyteBuiltInputs are the reviews of every job Flyte's backend built
// (testdata/flyte, both versions), each also as a dry run.
func flyteBuiltInputs(t testing.TB) []hostileInput {
	t.Helper()
	var inputs []hostileInput
	for _, version := range mutate.MPIJobVersions {
		names, err := fixtures.FlyteJobNames(version)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			input := "testdata/flyte/" + version + "/" + name
			inputs = append(inputs, hostileInput{input: input, body: reviewOf(t, version, "CREATE", flyteObject(t, version, name))},
				hostileInput{input: input + ", dry run", body: reviewOf(t, version, "CREATE", flyteObject(t, version, name), fixtures.DryRun())})
		}
	}
	return inputs
}
