// Package admission serves the webhook's decision, mutate.Decide, as a
// Kubernetes mutating admission webhook. cmd/webhook makes the Handler
// (NewHandler) and gives it to internal/server (server.New), which serves it
// at Path behind its bounds on what a client may send, the body read whole.
// The walk of a review from there to the decision and back, each step
// calling only the next, none a layer it left:
//
//  1. Handler.ServeHTTP decodes the AdmissionReview, an admission.k8s.io/v1
//     review of an object, with its MPIJob in one pass (readReview, in
//     review.go), and puts the job in the request's context;
//  2. controller-runtime's admission.Webhook.Handle recovers a panic, puts
//     a logger in the context, and calls the decider's Handle;
//  3. the decider leaves every request that is no MPIJob creation
//     unchanged, gives the job to mutate.Decide, counts and logs the
//     decision, and answer turns it into the response: a JSON patch, or a
//     denial; the Webhook completes it (its uid, its status);
//  4. Handler.ServeHTTP writes it as the Webhook writes its own (writeReview).
//
// A body that the one pass does not read (malformed, a review of another
// version, a field of the wrong JSON type) goes whole to the Webhook
// instead, which decodes it with the API machinery's codec, calls the
// decider's Handle (which then decodes the object itself) and writes the
// answer: such a body is answered as controller-runtime answers it.
//
// The one pass exists for its cost: controller-runtime's codec reads the
// body four times and the object is then decoded again, which doubles the
// CPU of a review and halves the throughput over TLS (docs/PERFORMANCE.md).
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
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/truncate"
)

// Path is where the webhook is served.
const Path = "/mutate-mpijob"

// Handler answers AdmissionReviews of MPIJobs: it is the webhook's
// http.Handler. NewHandler makes it.
type Handler struct {
	jobs *mutate.JobDecoder // the decider's
	// webhook is controller-runtime's, whose Handler is the decider.
	webhook *ctrladmission.Webhook
	// log is the Webhook's own logger, for what writeReview logs.
	log logr.Logger
}

// NewHandler returns the handler the server runs: it decides with opts,
// counts each decision in flyte_mpi_webhook_decisions_total, and gives it
// to observe too, when observe is not nil.
func NewHandler(opts mutate.Options, observe func(mutate.Decision)) *Handler {
	jobs := mutate.NewJobDecoder(opts.FlyteTaskSelector)
	h := &Handler{jobs: jobs, log: logf.Log.WithName("admission"),
		webhook: &ctrladmission.Webhook{Handler: &decider{opts: opts, jobs: jobs, observe: observe}, LogConstructor: logConstructor}}
	// StandaloneWebhook gives the Webhook the Handler's logger; with no
	// MetricsPath it cannot fail.
	_, _ = ctrladmission.StandaloneWebhook(h.webhook, ctrladmission.StandaloneOptions{Logger: h.log})
	return h
}

// Webhook is controller-runtime's admission.Webhook that the Handler
// answers through: the preview gives it requests as the API server would.
func (h *Handler) Webhook() *ctrladmission.Webhook { return h.webhook }

// ServeHTTP answers an AdmissionReview; the package doc has its walk.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.Header.Get("Content-Type") != "application/json" {
		h.webhook.ServeHTTP(w, r) // refused before any decode
		return
	}
	rv, err := readReview(r, h.jobs)
	if err != nil {
		h.webhook.ServeHTTP(w, r) // the codec reads the same bytes, and the decider answers
		return
	}
	req := ctrladmission.Request{AdmissionRequest: rv.request.AdmissionRequest}
	if log := h.log; log.V(5).Enabled() {
		logConstructor(log, &req).V(5).Info("received request") // as the Webhook logs a request it decoded
	}
	writeReview(w, h.webhook.Handle(context.WithValue(r.Context(), decodedJob{}, rv.job), req), h.log)
}

// decodedJob is the context key of the job the one pass decoded.
type decodedJob struct{}

// decider decides on the requests the Webhook hands it.
type decider struct {
	opts    mutate.Options
	jobs    *mutate.JobDecoder // of opts' FlyteTaskSelector
	observe func(mutate.Decision)
}

// Handle decides on req and answers it.
func (d *decider) Handle(ctx context.Context, req ctrladmission.Request) ctrladmission.Response {
	job, _ := ctx.Value(decodedJob{}).(*mutate.Job) // nil for a request the Webhook decoded
	decision := d.decide(&req.AdmissionRequest, job)
	countDecision(decision)
	if d.observe != nil {
		d.observe(decision)
	}
	logDecision(logf.FromContext(ctx), decision, req.DryRun)
	return answer(decision, &req.AdmissionRequest)
}

// decide is mutate.Decide's decision on the job that req creates, with job
// as its object when not nil; every other request, and any request for a
// subresource, is allowed unchanged.
func (d *decider) decide(req *admissionv1.AdmissionRequest, job *mutate.Job) mutate.Decision {
	switch {
	case req.Kind.Group != mutate.MPIJobGroup || req.Kind.Kind != mutate.MPIJobKind || !slices.Contains(mutate.MPIJobVersions, req.Kind.Version):
		return skipped // not an MPIJob of a version the patch fits
	case req.Operation != admissionv1.Create:
		return skipped // the worker command is decided once, when the job is created
	case req.SubResource != "" || req.Resource.Resource != mutate.MPIJobResource:
		return skipped // a status update or another resource of the same kind
	}
	if job == nil {
		if len(req.Object.Raw) == 0 {
			return malformed(errors.New("the AdmissionReview's request has no object to create"))
		}
		var err error
		if job, err = d.jobs.Decode(req.Object.Raw); err != nil {
			// A field Decide reads has the wrong JSON type: the API server's
			// validation refuses the object itself, with a message that says where.
			return mutate.Decision{Outcome: mutate.OutcomeUnchanged, Source: mutate.SourceNone, Container: -1, Warnings: []string{
				"the MPIJob could not be read, so no worker command was injected: " + err.Error()}}
		}
	}
	if want := req.Kind.Group + "/" + req.Kind.Version; job.APIVersion != want || job.Kind != req.Kind.Kind {
		return malformed(fmt.Errorf("the object is apiVersion %s kind %s, but the request is for %s %s",
			truncate.Quoted(job.APIVersion, truncate.MaxQuotedBytes), truncate.Quoted(job.Kind, truncate.MaxQuotedBytes), want, req.Kind.Kind))
	}
	return mutate.Decide(job, d.opts)
}

// outcomeMalformed is the outcome of a request whose object cannot be
// given to Decide: it is refused as a bad request, and counted beside
// Decide's outcomes.
const outcomeMalformed mutate.Outcome = "malformed"

// skipped is the decision on a request that is no MPIJob creation.
var skipped = mutate.Decision{Outcome: mutate.OutcomeSkippedNotFlyte, Source: mutate.SourceNone, Container: -1}

// malformed is the decision on a request whose object err says cannot be read.
func malformed(err error) mutate.Decision {
	return mutate.Decision{Outcome: outcomeMalformed, Source: mutate.SourceNone, Container: -1, Err: err}
}

// answer is the response to req that carries decision d.
func answer(d mutate.Decision, req *admissionv1.AdmissionRequest) ctrladmission.Response {
	resp := ctrladmission.Allowed("")
	switch d.Outcome {
	case mutate.OutcomeDeniedInvalid:
		resp = invalid(d.Err, req)
	case outcomeMalformed:
		resp = ctrladmission.Errored(http.StatusBadRequest, d.Err)
		resp.Result.Reason = metav1.StatusReasonBadRequest
	case mutate.OutcomeMutated:
		patch, err := encodePatch(d)
		if err != nil {
			return ctrladmission.Errored(http.StatusInternalServerError, err)
		}
		patchType := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &patchType
	}
	resp.Warnings = d.Warnings
	return resp
}

// invalid refuses a job whose annotation is invalid as the API server
// refuses an invalid object (apierrors.NewInvalid): 422 Invalid, the job,
// and the annotation's path as the field, which kubectl prints.
// flytepropeller fails a task whose create is refused so at once
// (BadTaskFormat), where a 403 would be retried as a user error that every
// retry meets again.
func invalid(err error, req *admissionv1.AdmissionRequest) ctrladmission.Response {
	status := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
		Reason: metav1.StatusReasonInvalid, Message: err.Error()}
	if annotationErr, ok := errors.AsType[*mutate.AnnotationError](err); ok {
		status.Details = &metav1.StatusDetails{Group: req.Kind.Group, Kind: req.Kind.Kind, Name: req.Name,
			Causes: []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: annotationErr.Field(),
				Message: annotationErr.Detail()}}}
	}
	return ctrladmission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: status}}
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
func logConstructor(base logr.Logger, req *ctrladmission.Request) logr.Logger {
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
