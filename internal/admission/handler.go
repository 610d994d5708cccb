// Package admission serves mutate.Decider as a Kubernetes mutating
// admission webhook: controller-runtime's admission.Webhook reads the
// AdmissionReview, recovers a panic and puts a logger in the request's
// context; Handler turns the decision into the answer, a JSON patch or a
// denial. Every decision about an MPIJob is made in package mutate; the
// bounds on what a client may send are internal/server's.
package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
)

// Path is where the webhook is served.
const Path = "/mutate-mpijob"

// Handler decides on each review with Options.
type Handler struct {
	// Options are the decision's settings, read at the first review.
	Options mutate.Options
	// Observe, when set, is called with the decision on every review answered, for metrics.
	Observe func(mutate.Decision)

	decider     *mutate.Decider
	deciderOnce sync.Once
}

// Webhook serves h behind controller-runtime's admission.Webhook, with a
// logger for each request.
func (h *Handler) Webhook() *admission.Webhook {
	return &admission.Webhook{Handler: h, LogConstructor: logConstructor}
}

// Handle answers one admission request.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	h.deciderOnce.Do(func() { h.decider = mutate.NewDecider(h.Options) })
	d := h.decider.Decide(&req.AdmissionRequest)
	if h.Observe != nil {
		h.Observe(d)
	}
	logDecision(logf.FromContext(ctx), d, req.DryRun)
	return respond(d, &req.AdmissionRequest)
}

// respond is the answer to req that carries decision d.
func respond(d mutate.Decision, req *admissionv1.AdmissionRequest) admission.Response {
	resp := admission.Allowed("")
	switch d.Outcome {
	case mutate.OutcomeDeniedInvalid:
		resp = denyInvalid(d.Err, req)
	case mutate.OutcomeMalformed:
		resp = admission.Errored(http.StatusBadRequest, d.Err)
		resp.Result.Reason = metav1.StatusReasonBadRequest
	case mutate.OutcomeMutated:
		patch, err := encodePatch(d)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		patchType := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &patchType
	}
	resp.Warnings = d.Warnings
	return resp
}

// denyInvalid refuses a job whose annotation is invalid as the API server
// refuses an invalid object (apierrors.NewInvalid): 422 Invalid, the job,
// and the annotation's path as the field, which kubectl prints.
// flytepropeller fails a task whose create is refused so at once
// (BadTaskFormat), where a 403 would be retried as a user error that every
// retry meets again.
func denyInvalid(err error, req *admissionv1.AdmissionRequest) admission.Response {
	status := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
		Reason: metav1.StatusReasonInvalid, Message: err.Error()}
	if annotationErr, ok := errors.AsType[*mutate.AnnotationError](err); ok {
		status.Details = &metav1.StatusDetails{Group: req.Kind.Group, Kind: req.Kind.Kind, Name: req.Name,
			Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: annotationErr.Field(),
				Message: mutate.Truncate(annotationErr.Err.Error())}}}
	}
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: status}}
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

// logConstructor gives each request's logger the request's identity, as
// admission.DefaultLogConstructor does, without the user's name.
func logConstructor(base logr.Logger, req *admission.Request) logr.Logger {
	if req == nil {
		return base
	}
	return base.WithValues("uid", req.UID, "namespace", req.Namespace, "name", req.Name, "kind", req.Kind)
}

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
