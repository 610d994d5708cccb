// Package refhook holds what the benchmarks of docs/PERFORMANCE.md share:
// the MPIJob they send, and the reference webhooks they compare ours
// against, which decode the AdmissionReview and allow it with no patch (the
// no-op, the floor) or with the same fixed patch whatever the object (the
// least a mutating webhook does). It imports nothing of ours that decides,
// so that a server of it holds what any controller-runtime webhook holds.
package refhook

import (
	"encoding/json"
	"io"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kjson "sigs.k8s.io/json"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// Job is the MPIJob of version the benchmarks send: a Horovod task's with
// its worker command declared, as Flyte's backend builds it.
func Job(version string) (*unstructured.Unstructured, error) {
	return fixtures.FlyteJob(version, fixtures.HorovodWorkerCommand)
}

// Handler answers every AdmissionReview allowed, with its uid and patch
// (none when nil). It reads the review as the webhook does, into the typed
// admission.k8s.io/v1 AdmissionReview with sigs.k8s.io/json, the body
// bounded alike; a body that is not a review gets 400.
func Handler(patch []byte) http.Handler {
	var patchType *admissionv1.PatchType
	if patch != nil {
		patchType = new(admissionv1.PatchTypeJSONPatch)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 8<<20))
		if err == nil {
			err = kjson.UnmarshalCaseSensitivePreserveInts(body, &review)
		}
		if err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		response, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: &admissionv1.AdmissionResponse{
			UID: review.Request.UID, Allowed: true, Patch: patch, PatchType: patchType}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(response)
	})
}
