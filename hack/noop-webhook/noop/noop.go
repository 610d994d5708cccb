// Package noop is the floor of the performance comparisons in
// docs/PERFORMANCE.md: an admission webhook that decodes the AdmissionReview
// and allows it, unchanged. The in-process benchmark
// (internal/admission/bench_test.go) calls Admit; the no-op webhook binary
// (hack/noop-webhook) serves Handler, so both comparisons use one floor.
package noop

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"
)

// maxRequestBytes bounds a request body as internal/admission does, so that
// both servers read bodies the same way.
const maxRequestBytes = 8 << 20

// Admit decodes an AdmissionReview into the typed admission.k8s.io/v1
// AdmissionReview, with sigs.k8s.io/json (the decoder apimachinery's JSON
// serializer runs under controller-runtime's codec, without the codec's
// extra pass), and answers it allowed, with its uid and no patch.
func Admit(body []byte) ([]byte, error) {
	var review admissionv1.AdmissionReview
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &review); err != nil {
		return nil, err
	}
	if review.Request == nil {
		return nil, errors.New("the AdmissionReview has no request")
	}
	return json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: review.TypeMeta,
		Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true},
	})
}

// Handler serves Admit over HTTP: the body in, bounded as the webhook bounds
// it, and the response out; a body Admit cannot answer gets 400.
var Handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	response, err := Admit(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(response)
})
