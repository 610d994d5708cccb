package admission

import (
	"encoding/json"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// FuzzServeHTTP feeds the handler arbitrary bodies. It must never panic nor
// answer 5xx; a 200 must carry a response that echoes the request's uid;
// and a patch must apply to the object, change nothing but the worker
// command and the source annotation, and, applied, leave nothing to patch.
func FuzzServeHTTP(f *testing.F) {
	for _, version := range []string{"v1", "v2beta1"} {
		names, err := fixtures.FlyteJobNames(version)
		if err != nil {
			f.Fatal(err)
		}
		for _, name := range names { // every job Flyte's own backend built
			f.Add(reviewOf(f, version, "CREATE", flyteObject(f, version, name)))
		}
		f.Add(reviewOf(f, version, "CREATE", sampleJob(f, version, annotate(mutate.AnnotationTaskCustom, flytekitCustom))))
		f.Add(reviewOf(f, version, "CREATE", sampleJob(f, version, annotate(mutate.AnnotationWorkerSpecCommand, "/usr/sbin/sshd -De"))))
		f.Add(reviewOf(f, version, "UPDATE", sampleJob(f, version, nil)))
	}
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"kubeflow.org","version":"v1","kind":"MPIJob"},"operation":"CREATE","object":{"apiVersion":"kubeflow.org/v1","kind":"MPIJob","metadata":{"labels":{"execution-id":"e","task-name":"t"},"annotations":{"mpi.flyte.org/worker-spec-command":"sshd"}},"spec":{"mpiReplicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"x","command":null}]}}}}}}}}`))
	f.Add([]byte(`[`))
	handler := newHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := post(handler, body)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		var sent struct {
			Request struct {
				UID    string          `json:"uid"`
				Object json.RawMessage `json:"object"`
			} `json:"request"`
		}
		_ = kjson.UnmarshalCaseSensitivePreserveInts(body, &sent) // a 200 means the uid was read
		var answer admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || answer.Response == nil {
			t.Fatalf("a 200 without an AdmissionReview response: %v\n%s", err, rec.Body)
		}
		if result := answer.Response.Result; result != nil && result.Code >= 500 {
			t.Fatalf("answered %d: %s", result.Code, result.Message)
		}
		if !answer.Response.Allowed {
			return // a body that is no review, or a denial
		}
		if string(answer.Response.UID) != sent.Request.UID {
			t.Fatalf("uid %q answered for %q", answer.Response.UID, sent.Request.UID)
		}
		if len(answer.Response.Patch) == 0 {
			return
		}
		patched := applyPatch(t, sent.Request.Object, answer.Response)
		checkOnlyWorkerCommandChanged(t, sent.Request.Object, patched)
		var again map[string]any
		if err := json.Unmarshal(body, &again); err != nil {
			t.Fatal(err)
		}
		again["request"].(map[string]any)["object"] = json.RawMessage(patched)
		second, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		out := post(handler, second).Body.Bytes()
		var secondAnswer admissionv1.AdmissionReview
		if err := json.Unmarshal(out, &secondAnswer); err != nil || !secondAnswer.Response.Allowed || len(secondAnswer.Response.Patch) > 0 {
			t.Fatalf("not idempotent: %v %s", err, out)
		}
	})
}
