package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

// answer is the response to req that carries decision d.
func answer(d mutate.Decision, req *admissionv1.AdmissionRequest) admissionv1.AdmissionResponse {
	resp := admissionv1.AdmissionResponse{Allowed: true, Result: &metav1.Status{Code: http.StatusOK}}
	switch d.Outcome {
	case mutate.OutcomeDeniedInvalid:
		resp = invalid(d.Err, req)
	case mutate.OutcomeMalformed:
		resp = errored(http.StatusBadRequest, d.Err)
		resp.Result.Reason = metav1.StatusReasonBadRequest
	case mutate.OutcomeMutated:
		patch, err := encodePatch(d)
		if err != nil {
			return errored(http.StatusInternalServerError, err)
		}
		patchType := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &patchType
	}
	resp.Warnings = d.Warnings
	return resp
}

// errored refuses a request that could not be decided, with code and err's
// message, as controller-runtime's admission.Errored does.
func errored(code int32, err error) admissionv1.AdmissionResponse {
	return admissionv1.AdmissionResponse{Result: &metav1.Status{Code: code, Message: err.Error()}}
}

// invalid refuses a job whose annotation is invalid as the API server
// refuses an invalid object (apierrors.NewInvalid): 422 Invalid, the job,
// and the annotation's path as the field, which kubectl prints.
// flytepropeller fails a task whose create is refused so at once
// (BadTaskFormat), where a 403 would be retried as a user error that every
// retry meets again.
func invalid(err error, req *admissionv1.AdmissionRequest) admissionv1.AdmissionResponse {
	status := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
		Reason: metav1.StatusReasonInvalid, Message: err.Error()}
	if annotationErr, ok := errors.AsType[*mutate.AnnotationError](err); ok {
		status.Details = &metav1.StatusDetails{Group: req.Kind.Group, Kind: req.Kind.Kind, Name: req.Name,
			Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: annotationErr.Field(),
				Message: annotationErr.Detail()}}}
	}
	return admissionv1.AdmissionResponse{Allowed: false, Result: status}
}

// encodePatch encodes d's JSON patch without HTML escaping: worker args of
// '<' would otherwise take six bytes each, and the patch carries the args.
// jsonpatch.Operation's own MarshalJSON escapes its value.
func encodePatch(d mutate.Decision) ([]byte, error) {
	type operation struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"` // every add of the patch has one
	}
	ops := make([]operation, len(d.Patch))
	for i, op := range d.Patch {
		ops[i] = operation{op.Operation, op.Path, op.Value}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ops); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// logDecision logs d, the decision on a request, with log, the request's.
func logDecision(log logr.Logger, d mutate.Decision, dryRun *bool) {
	if d.Outcome == mutate.OutcomeSkippedNotFlyte {
		log.V(1).Info("decision", "outcome", d.Outcome)
		return
	}
	kv := []any{"outcome", d.Outcome, "source", d.Source, "container", d.ContainerName}
	if dryRun != nil && *dryRun {
		kv = append(kv, "dryRun", true)
	}
	if d.Err != nil {
		kv = append(kv, "reason", d.Err.Error())
	}
	if len(d.Warnings) > 0 {
		kv = append(kv, "warnings", d.Warnings)
	}
	log.Info("decision", kv...)
}
