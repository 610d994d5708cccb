package admission

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
)

// writeReview writes rv's response to w in a review of rv's typeMeta: empty,
// for the response to a body that is no review. A failed write, a broken
// connection, is logged, and tried once more with a 500, as
// controller-runtime's admission.Webhook does.
func writeReview(w io.Writer, rv *review, log logr.Logger) {
	resp := &rv.response
	if err := json.NewEncoder(w).Encode(admissionv1.AdmissionReview{TypeMeta: rv.typeMeta, Response: resp}); err != nil {
		log.Error(err, "unable to encode and write the response")
		serverError := errored(http.StatusInternalServerError, err)
		if err := json.NewEncoder(w).Encode(admissionv1.AdmissionReview{Response: &serverError}); err != nil {
			log.Error(err, "still unable to encode and write the InternalServerError response")
		}
		return
	}
	if log.V(5).Enabled() {
		if result := resp.Result; result != nil {
			log = log.WithValues("code", result.Code, "reason", result.Reason, "message", result.Message)
		}
		log.V(5).Info("wrote response", "requestID", resp.UID, "allowed", resp.Allowed)
	}
}
