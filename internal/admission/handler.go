// Package admission serves the webhook's decision, mutate.Decide, as a
// Kubernetes mutating admission webhook. cmd/webhook makes the Handler
// (NewHandler) and gives it to internal/server (server.New), which serves it
// at Path behind its bounds on what a client may send. The walk of a review
// from there to the decision and back:
//
//  1. Handler.ServeHTTP reads the body and decodes the AdmissionReview, an
//     admission.k8s.io/v1 review of an object, with its MPIJob in one pass
//     (readReview, in review.go);
//  2. controller-runtime's admission.Webhook.Handle, around answer, recovers
//     a panic, puts a logger in the request's context and completes the
//     answer (its uid, its status): handleReview;
//  3. answer leaves every request that is no MPIJob creation unchanged,
//     gives the job to mutate.Decide, counts and logs the decision, and
//     respond turns it into the answer: a JSON patch, or a denial;
//  4. writeReview writes the answer as the Webhook writes its own.
//
// A body that the one pass does not read (malformed, a review of another
// version, a field of the wrong JSON type) goes whole to the Webhook
// instead, which decodes it with the API machinery's codec, calls
// Handler.Handle (answer, which decodes the object there) and writes the
// answer itself: such a body is answered as controller-runtime answers it.
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
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/truncate"
)

// Path is where the webhook is served.
const Path = "/mutate-mpijob"

// Handler answers AdmissionReviews of MPIJobs: it is the webhook's
// http.Handler, and the admission.Handler of the Webhook that answers the
// bodies its one pass does not read. NewHandler makes it.
type Handler struct {
	opts    mutate.Options
	jobs    *mutate.JobDecoder // of opts' FlyteTaskSelector
	observe func(mutate.Decision)
	// webhook is controller-runtime's, whose Handler is this Handler.
	webhook *admission.Webhook
	// log is the Webhook's own logger, for what writeReview logs.
	log logr.Logger
}

// NewHandler returns the handler the server runs: it decides with opts,
// counts each decision in flyte_mpi_webhook_decisions_total, and gives it
// to observe too, when observe is not nil (the preview prints it).
func NewHandler(opts mutate.Options, observe func(mutate.Decision)) *Handler {
	h := &Handler{opts: opts, jobs: mutate.NewJobDecoder(opts.FlyteTaskSelector), observe: observe,
		log: logf.Log.WithName("admission")}
	h.webhook = &admission.Webhook{Handler: h, LogConstructor: logConstructor}
	return h
}

// ServeHTTP answers an AdmissionReview; the package doc has its walk.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.Header.Get("Content-Type") != "application/json" {
		h.webhook.ServeHTTP(w, r) // refused before any decode
		return
	}
	rv, err := readReview(r, h.jobs)
	if err != nil {
		h.webhook.ServeHTTP(w, r) // the codec reads the same bytes, and Handle answers
		return
	}
	writeReview(w, h.handleReview(r.Context(), rv), h.log)
}

// handleReview answers rv through controller-runtime's
// admission.Webhook.Handle, with a Webhook of rv's own whose Handler is rv:
// so rv's job reaches answer as a value, and what surrounds the decision
// (panic recovery, the logger, Response.Complete) is the library's.
func (h *Handler) handleReview(ctx context.Context, rv *review) admission.Response {
	req := admission.Request{AdmissionRequest: rv.request.AdmissionRequest}
	if log := h.log; log.V(5).Enabled() {
		logConstructor(log, &req).V(5).Info("received request") // as the Webhook logs a request it decoded
	}
	rv.handler = h
	rv.webhook = admission.Webhook{Handler: rv, LogConstructor: logConstructor}
	// StandaloneWebhook gives it the Handler's logger, where the Webhook
	// would make one for each review; with no MetricsPath it cannot fail.
	_, _ = admission.StandaloneWebhook(&rv.webhook, admission.StandaloneOptions{Logger: h.log})
	return rv.webhook.Handle(ctx, req)
}

// Handle answers req, whose job the one pass decoded with it.
func (rv *review) Handle(ctx context.Context, req admission.Request) admission.Response {
	return rv.handler.answer(ctx, &req.AdmissionRequest, rv.job)
}

// Handle answers an admission request that controller-runtime's Webhook
// decoded: its object is decoded here.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	return h.answer(ctx, &req.AdmissionRequest, nil)
}

// answer decides on req and makes the answer. job is req's object when the
// one pass decoded it; when nil, the object is decoded from req.Object.Raw.
func (h *Handler) answer(ctx context.Context, req *admissionv1.AdmissionRequest, job *mutate.Job) admission.Response {
	d := h.decision(req, job)
	countDecision(d)
	if h.observe != nil {
		h.observe(d)
	}
	logDecision(logf.FromContext(ctx), d, req.DryRun)
	return respond(d, req)
}

// decision is mutate.Decide's on the job that req creates, with job as its
// object when not nil; every other request, and any request for a
// subresource, is allowed unchanged.
func (h *Handler) decision(req *admissionv1.AdmissionRequest, job *mutate.Job) mutate.Decision {
	skip := mutate.Decision{Outcome: mutate.OutcomeSkippedNotFlyte, Container: -1}
	switch {
	case req.Kind.Group != mutate.MPIJobGroup || req.Kind.Kind != mutate.MPIJobKind || !slices.Contains(mutate.MPIJobVersions, req.Kind.Version):
		return skip // not an MPIJob of a version the patch fits
	case req.Operation != admissionv1.Create:
		return skip // the worker command is decided once, when the job is created
	case req.SubResource != "" || req.Resource.Resource != mutate.MPIJobResource:
		return skip // a status update or another resource of the same kind
	}
	if job == nil {
		if len(req.Object.Raw) == 0 {
			return malformed(errors.New("the AdmissionReview's request has no object to create"))
		}
		var err error
		if job, err = h.jobs.Decode(req.Object.Raw); err != nil {
			// A field Decide reads has the wrong JSON type: the API server's
			// validation refuses the object itself, with a message that says where.
			return mutate.Decision{Outcome: mutate.OutcomeUnchanged, Container: -1, Warnings: []string{
				"the MPIJob could not be read, so no worker command was injected: " + err.Error()}}
		}
	}
	if want := req.Kind.Group + "/" + req.Kind.Version; job.APIVersion != want || job.Kind != req.Kind.Kind {
		return malformed(fmt.Errorf("the object is apiVersion %s kind %s, but the request is for %s %s",
			truncate.Quoted(job.APIVersion, maxQuotedBytes), truncate.Quoted(job.Kind, maxQuotedBytes), want, req.Kind.Kind))
	}
	return mutate.Decide(job, h.opts)
}

// malformed is the decision on a request whose object err says cannot be read.
func malformed(err error) mutate.Decision {
	return mutate.Decision{Outcome: mutate.OutcomeMalformed, Container: -1, Err: err}
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
				Message: annotationErr.Detail()}}}
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
