// Package admission serves mutate.Decider as a Kubernetes mutating
// admission webhook. Handler reads the AdmissionReview the API server sends,
// an admission.k8s.io/v1 review of an object, and its object in one pass
// (mutate.DecodeReview); every other body, malformed or not, goes to
// controller-runtime's admission.Webhook, which decodes it with the API
// machinery's codec. Both then answer through the Webhook's Handle, which
// recovers a panic and puts a logger in the request's context; Handler
// turns the decision into the answer, a JSON patch or a denial. Every
// decision about an MPIJob is made in package mutate; the bounds on what a
// client may send are internal/server's.
package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
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

// maxRequestBytes is admission.Webhook's limit on a body: a body that
// reaches it is left to the Webhook, which refuses it.
const maxRequestBytes = 7 << 20

// Handler decides on each review with Options. It is the webhook's
// http.Handler, and the admission.Handler of its admission.Webhook.
type Handler struct {
	// Options are the decision's settings, read at the first review.
	Options mutate.Options
	// Observe, when set, is called with the decision on every review answered, for metrics.
	Observe func(mutate.Decision)

	setupOnce sync.Once
	decider   *mutate.Decider
	webhook   *admission.Webhook
	log       logr.Logger // admission.Webhook's own, for what it logs when it writes the answer
}

// setup makes, at the first review, what answering takes.
func (h *Handler) setup() {
	h.setupOnce.Do(func() {
		h.decider, h.webhook, h.log = mutate.NewDecider(h.Options), h.Webhook(), logf.Log.WithName("admission")
	})
}

// Webhook serves h behind controller-runtime's admission.Webhook, with a
// logger for each request.
func (h *Handler) Webhook() *admission.Webhook {
	return &admission.Webhook{Handler: h, LogConstructor: logConstructor}
}

// decodedJobKey carries, in a request's context, the job ServeHTTP decoded
// with the review, for Handle.
type decodedJobKey struct{}

// ServeHTTP answers an AdmissionReview. One that DecodeReview reads is
// answered as admission.Webhook answers it, byte for byte, without the
// codec's passes over the body; any other body goes to the Webhook.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.setup()
	if r.Body == nil || r.Body == http.NoBody || r.Header.Get("Content-Type") != "application/json" {
		h.webhook.ServeHTTP(w, r) // refused before any decode
		return
	}
	body, err := readBody(r)
	var req *admissionv1.AdmissionRequest
	var job *mutate.Job
	if err == nil {
		req, job, err = h.decider.DecodeReview(body)
	}
	if err != nil {
		h.webhook.ServeHTTP(w, r)
		return
	}
	request := admission.Request{AdmissionRequest: *req}
	if log := h.log; log.V(5).Enabled() {
		logConstructor(log, &request).V(5).Info("received request")
	}
	h.writeReview(w, h.webhook.Handle(context.WithValue(r.Context(), decodedJobKey{}, job), request))
}

// errBodyLeft is readBody's error for a body that reaches maxRequestBytes.
var errBodyLeft = errors.New("the body reaches the webhook's limit")

// readBody reads r's body in one allocation of its Content-Length. When it
// fails, or the body reaches maxRequestBytes, it puts back what it read,
// followed by the rest or the error, for admission.Webhook to meet alike;
// and when DecodeReview fails, the Webhook reads the same bytes.
func readBody(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(int(min(max(r.ContentLength, 0), maxRequestBytes)) + bytes.MinRead) // MinRead: room for ReadFrom's EOF
	_, err := buf.ReadFrom(io.LimitReader(r.Body, maxRequestBytes))
	rest := r.Body
	switch {
	case err != nil:
		rest = io.NopCloser(&failingReader{err})
	case buf.Len() >= maxRequestBytes:
		err = errBodyLeft
	}
	r.Body = readCloser{io.MultiReader(bytes.NewReader(buf.Bytes()), rest), r.Body}
	return buf.Bytes(), err
}

// readCloser reads the body put back, and closes the request's.
type readCloser struct {
	io.Reader
	io.Closer
}

// failingReader fails with err, as the body did.
type failingReader struct{ err error }

func (f *failingReader) Read([]byte) (int, error) { return 0, f.err }

// writeReview writes resp as admission.Webhook writes its answer to an
// admission.k8s.io/v1 review: the answer to the API server, and the logs.
func (h *Handler) writeReview(w io.Writer, resp admission.Response) {
	review := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: mutate.ReviewAPIVersion, Kind: mutate.ReviewKind},
		Response: &resp.AdmissionResponse}
	if err := json.NewEncoder(w).Encode(review); err != nil {
		// The connection broke: the Webhook tries once more, with a 500.
		h.log.Error(err, "unable to encode and write the response")
		serverError := admission.Errored(http.StatusInternalServerError, err)
		if err := json.NewEncoder(w).Encode(admissionv1.AdmissionReview{Response: &serverError.AdmissionResponse}); err != nil {
			h.log.Error(err, "still unable to encode and write the InternalServerError response")
		}
		return
	}
	if log := h.log; log.V(5).Enabled() {
		if result := resp.Result; result != nil {
			log = log.WithValues("code", result.Code, "reason", result.Reason, "message", result.Message)
		}
		log.V(5).Info("wrote response", "requestID", resp.UID, "allowed", resp.Allowed)
	}
}

// Handle answers one admission request.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	h.setup()
	job, _ := ctx.Value(decodedJobKey{}).(*mutate.Job) // nil unless ServeHTTP decoded it: DecideJob decodes req.Object
	d := h.decider.DecideJob(&req.AdmissionRequest, job)
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
