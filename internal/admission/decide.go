package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/truncate"
)

// handle answers req (respond), and answers a panic with a 500, as
// controller-runtime's Webhook.Handle answers one, once the runtime's panic
// handlers have logged it.
func (h *Handler) handle(req *admissionv1.AdmissionRequest, job *mutate.Job, jobErr error) (resp admissionv1.AdmissionResponse) {
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

// requestLog is the logger of req: the request's identity, as
// controller-runtime's admission.DefaultLogConstructor gives it, without
// the user's name.
func requestLog(base logr.Logger, req *admissionv1.AdmissionRequest) logr.Logger {
	return base.WithValues("uid", req.UID, "namespace", req.Namespace, "name", req.Name, "kind", req.Kind)
}
