// Package admission serves the webhook's decision, mutate.Decide, as a
// Kubernetes mutating admission webhook. cmd/webhook makes the Handler
// (NewHandler) and gives it to internal/server (server.New), which serves it
// at Path behind its bounds on what a client may send, the body read whole.
//
// A review goes down one path, each step calling only the next:
//
//  1. read: ServeHTTP takes the body once (readBody, in review.go);
//  2. decode: decodeReview reads the AdmissionReview and its MPIJob in one
//     pass; a body it cannot read, which no API server sends, is read by
//     the API machinery's codec instead, only so as to answer it in the
//     codec's words (decodeOther);
//  3. decide: review gives the request to mutate.Decide (decide), counts
//     and logs the decision, and recovers a panic;
//  4. answer: answer turns the decision into the response, a JSON patch or
//     a denial;
//  5. write: writeReview writes it.
//
// Every answer is byte for byte what controller-runtime's admission.Webhook
// answers around the same decision (TestAnswersAsWebhook holds them), and the one
// pass is the webhook's for its cost: the Webhook's codec reads a body
// four times and the object is then decoded again, which doubles the CPU
// of a review and halves the throughput over TLS (docs/PERFORMANCE.md).
package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/truncate"
)

// Path is where the webhook is served.
const Path = "/mutate-mpijob"

// Handler answers AdmissionReviews of MPIJobs: it is the webhook's
// http.Handler. NewHandler makes it.
type Handler struct {
	opts    mutate.Options
	jobs    *mutate.JobDecoder // of opts' FlyteTaskSelector
	observe func(mutate.Decision)
	log     logr.Logger
}

// NewHandler returns the handler the server runs: it decides with opts,
// counts each decision in flyte_mpi_webhook_decisions_total, and gives it
// to observe too, when observe is not nil.
func NewHandler(opts mutate.Options, observe func(mutate.Decision)) *Handler {
	return &Handler{opts: opts, jobs: mutate.NewJobDecoder(opts.FlyteTaskSelector), observe: observe,
		log: logf.Log.WithName("admission")}
}

// ServeHTTP answers an AdmissionReview: read, decode, decide, answer, write.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rv, refused := h.readReview(r)
	if refused != nil {
		h.log.Error(refused.err, refused.why)
		rv = &review{answer: errored(refused.code, refused.err)} // written untyped: the body was no review
	} else {
		rv.answer = h.review(rv.request, rv.job, rv.jobErr)
	}
	writeReview(w, rv, h.log)
}

// Review answers req, an admission request already decoded, as ServeHTTP
// answers the review that carries it.
func (h *Handler) Review(req *admissionv1.AdmissionRequest) admissionv1.AdmissionResponse {
	job, err := decodeObject(req, h.jobs)
	return h.review(req, job, err)
}

// review answers req (respond), and answers a panic with a 500, as
// controller-runtime's Webhook answers one, once the runtime's panic
// handlers have logged it.
func (h *Handler) review(req *admissionv1.AdmissionRequest, job *mutate.Job, jobErr error) (resp admissionv1.AdmissionResponse) {
	defer func() {
		if r := recover(); r != nil {
			for _, handle := range utilruntime.PanicHandlers {
				handle(logf.IntoContext(context.Background(), requestLog(h.log, req)), r)
			}
			resp = errored(http.StatusInternalServerError, fmt.Errorf("panic: %v [recovered]", r))
			resp.UID = req.UID
		}
	}()
	return h.respond(req, job, jobErr)
}

// respond decides on req, whose object is job, or could not be read
// (jobErr), counts and logs the decision, and answers.
func (h *Handler) respond(req *admissionv1.AdmissionRequest, job *mutate.Job, jobErr error) admissionv1.AdmissionResponse {
	log := requestLog(h.log, req)
	log.V(5).Info("received request")
	decision := h.decide(req, job, jobErr)
	countDecision(decision)
	if h.observe != nil {
		h.observe(decision)
	}
	resp := answer(decision, req)
	resp.UID = req.UID
	logDecision(log, decision, req.DryRun)
	return resp
}

// decide is mutate.Decide's decision on job, the object that req creates,
// or on why it could not be read (jobErr); every other request, and any
// request for a subresource, is allowed unchanged.
func (h *Handler) decide(req *admissionv1.AdmissionRequest, job *mutate.Job, jobErr error) mutate.Decision {
	switch {
	case req.Kind.Group != mutate.MPIJobGroup || req.Kind.Kind != mutate.MPIJobKind || !slices.Contains(mutate.MPIJobVersions, req.Kind.Version):
		return skipped // not an MPIJob of a version the patch fits
	case req.Operation != admissionv1.Create:
		return skipped // the worker command is decided once, when the job is created
	case req.SubResource != "" || req.Resource.Resource != mutate.MPIJobResource:
		return skipped // a status update or another resource of the same kind
	}
	switch {
	case jobErr != nil:
		// A field Decide reads has the wrong JSON type: the API server's
		// validation refuses the object itself, with a message that says where.
		return mutate.Decision{Outcome: mutate.OutcomeUnchanged, Source: mutate.SourceNone, Container: -1, Warnings: []string{
			"the MPIJob could not be read, so no worker command was injected: " + jobErr.Error()}}
	case job == nil:
		return malformed(errors.New("the AdmissionReview's request has no object to create"))
	}
	if want := req.Kind.Group + "/" + req.Kind.Version; job.APIVersion != want || job.Kind != req.Kind.Kind {
		return malformed(fmt.Errorf("the object is apiVersion %s kind %s, but the request is for %s %s",
			truncate.Quoted(job.APIVersion, truncate.MaxQuotedBytes), truncate.Quoted(job.Kind, truncate.MaxQuotedBytes), want, req.Kind.Kind))
	}
	return mutate.Decide(job, h.opts)
}

// skipped is the decision on a request that is no MPIJob creation.
var skipped = mutate.Decision{Outcome: mutate.OutcomeSkippedNotFlyte, Source: mutate.SourceNone, Container: -1}

// malformed is the decision on a request whose object err says cannot be read.
func malformed(err error) mutate.Decision {
	return mutate.Decision{Outcome: mutate.OutcomeMalformed, Source: mutate.SourceNone, Container: -1, Err: err}
}

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

// requestLog is the logger of req: the request's identity, as
// controller-runtime's admission.DefaultLogConstructor gives it, without
// the user's name.
func requestLog(base logr.Logger, req *admissionv1.AdmissionRequest) logr.Logger {
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
