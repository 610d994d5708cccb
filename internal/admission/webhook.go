package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/truncate"
)

// NewWebhook returns the webhook the server runs: controller-runtime's
// admission.Webhook, which reads the body, decodes the AdmissionReview,
// recovers a panic, gives each request a logger and writes the answer,
// around a handler that decides with opts, counts each decision in
// flyte_mpi_webhook_decisions_total, and gives it to observe too, when
// observe is not nil (the preview prints it).
func NewWebhook(opts mutate.Options, observe func(mutate.Decision)) *admission.Webhook {
	return &admission.Webhook{Handler: &handler{opts: opts, observe: observe}, LogConstructor: logConstructor}
}

// handler decides on the requests the Webhook decoded.
type handler struct {
	opts    mutate.Options
	observe func(mutate.Decision)
}

// Handle decides on req and answers it.
func (h *handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	d := h.decide(&req.AdmissionRequest)
	countDecision(d)
	if h.observe != nil {
		h.observe(d)
	}
	logDecision(logf.FromContext(ctx), d, req.DryRun)
	return respond(d, &req.AdmissionRequest)
}

// decide is mutate.Decide's decision on the job that req creates; every
// other request, and any request for a subresource, is allowed unchanged.
func (h *handler) decide(req *admissionv1.AdmissionRequest) mutate.Decision {
	switch {
	case req.Kind.Group != mutate.MPIJobGroup || req.Kind.Kind != mutate.MPIJobKind || !slices.Contains(mutate.MPIJobVersions, req.Kind.Version):
		return skipped // not an MPIJob of a version the patch fits
	case req.Operation != admissionv1.Create:
		return skipped // the worker command is decided once, when the job is created
	case req.SubResource != "" || req.Resource.Resource != mutate.MPIJobResource:
		return skipped // a status update or another resource of the same kind
	case len(req.Object.Raw) == 0:
		return malformed(errors.New("the AdmissionReview's request has no object to create"))
	}
	job, err := mutate.DecodeJob(req.Object.Raw)
	if err != nil {
		// A field Decide reads has the wrong JSON type: the API server's
		// validation refuses the object itself, with a message that says where.
		return mutate.Decision{Outcome: mutate.OutcomeUnchanged, Container: -1, Warnings: []string{
			"the MPIJob could not be read, so no worker command was injected: " + err.Error()}}
	}
	if want := req.Kind.Group + "/" + req.Kind.Version; job.APIVersion != want || job.Kind != req.Kind.Kind {
		return malformed(fmt.Errorf("the object is apiVersion %s kind %s, but the request is for %s %s",
			truncate.Quoted(job.APIVersion, maxQuotedBytes), truncate.Quoted(job.Kind, maxQuotedBytes), want, req.Kind.Kind))
	}
	return mutate.Decide(job, h.opts)
}

// skipped is the decision on a request that is no MPIJob creation.
var skipped = mutate.Decision{Outcome: mutate.OutcomeSkippedNotFlyte, Container: -1}
