// Package admission serves mutate.Decide as a Kubernetes mutating admission
// webhook: an AdmissionReview in, the decision's JSON patch out. It is thin
// plumbing: every decision about an MPIJob is made in package mutate; this
// package only tells a review it can read from one it cannot.
//
// It is an http.Handler of its own rather than controller-runtime's
// admission.Webhook, which reads up to a fixed 7 MiB, decodes the whole
// object a second time into a RawExtension, and answers a broken body with
// HTTP 200 and a review without uid: this handler reads a body no larger than
// the API server ever sends, decodes only the fields Decide reads, answers a
// broken body with the HTTP status that names the problem, and counts it as
// malformed.
package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	kjson "sigs.k8s.io/json"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/server"
)

// Path is where the webhook is served.
const Path = "/mutate-mpijob"

// MaxRequestBytes bounds a request body: internal/server refuses a larger
// one before the handler runs; the handler's own check, the same number, is
// for where it is served without that server (httptest, the fuzz target),
// and bin/webhook preview reads no more from its standard input.
const MaxRequestBytes = server.MaxRequestBytes

// MPIJob's group and kind, and the versions whose worker containers sit at
// the path package mutate patches.
const (
	mpiJobGroup = "kubeflow.org"
	mpiJobKind  = "MPIJob"
)

var mpiJobVersions = []string{"v1", "v2beta1"}

// mpiJobResource is the resource of MPIJobs, as a review's request names it.
const mpiJobResource = "mpijobs"

// OutcomeMalformed is the outcome of a request that is no AdmissionReview of
// an MPIJob creation the handler can read: no decision was made.
const OutcomeMalformed mutate.Outcome = "malformed"

// Handler is the webhook's http.Handler.
type Handler struct {
	// Options are the decision's settings.
	Options mutate.Options
	// Observe, when set, is called with the decision on every review answered, for metrics.
	Observe func(mutate.Decision)
}

// review is the part of an admission.k8s.io/v1 AdmissionReview the handler
// reads. The object is decoded straight into mutate.Job in the same pass, so
// the fields the webhook does not read are skipped and never copied.
type review struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Request    *request `json:"request"`
}

type request struct {
	UID         types.UID                   `json:"uid"`
	Kind        metav1.GroupVersionKind     `json:"kind"`
	Resource    metav1.GroupVersionResource `json:"resource"`
	SubResource string                      `json:"subResource"`
	Namespace   string                      `json:"namespace"`
	Name        string                      `json:"name"`
	Operation   admissionv1.Operation       `json:"operation"`
	DryRun      *bool                       `json:"dryRun"`
	Object      *mutate.Job                 `json:"object"`
}

// BadRequestError is a body that is not an AdmissionReview the handler can
// answer; it is answered with HTTP 400 and no review.
type BadRequestError struct{ Reason string }

func (e *BadRequestError) Error() string { return e.Reason }

func badRequest(format string, args ...any) error {
	return &BadRequestError{Reason: fmt.Sprintf(format, args...)}
}

// ServeHTTP reads one AdmissionReview and answers it. The server bounds the
// time its body and answer may take, and the memory bodies may hold.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		h.refuse(w, "only POST is served", http.StatusMethodNotAllowed)
		return
	}
	if mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mediaType != "application/json" {
		h.refuse(w, fmt.Sprintf("Content-Type is %q; expected application/json", r.Header.Get("Content-Type")),
			http.StatusUnsupportedMediaType)
		return
	}
	if r.ContentLength > MaxRequestBytes {
		h.refuse(w, fmt.Sprintf("the body is %d bytes, more than the %d served", r.ContentLength, MaxRequestBytes),
			http.StatusRequestEntityTooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			h.refuse(w, fmt.Sprintf("the body is more than the %d bytes served", MaxRequestBytes),
				http.StatusRequestEntityTooLarge)
			return
		}
		h.refuse(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	response, err := h.Admit(r.Context(), body)
	if err != nil {
		h.refuse(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(response)
}

// Admit answers one AdmissionReview: the request's body in, the response's
// body out. It returns a *BadRequestError for a body it cannot answer.
func (h *Handler) Admit(ctx context.Context, body []byte) ([]byte, error) {
	var rev review
	var objectErr error
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &rev); err != nil {
		if isSyntax, offset := kjson.SyntaxErrorOffset(err); isSyntax {
			return nil, badRequest("the body is not JSON: %v (at byte %d)", err, offset)
		}
		// A field of the wrong type. Outside the object it is a broken review;
		// inside, the API server's validation will refuse the object itself.
		var outer struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Request    *struct {
				request
				Object json.RawMessage `json:"object"`
			} `json:"request"`
		}
		if kjson.UnmarshalCaseSensitivePreserveInts(body, &outer) != nil {
			return nil, badRequest("the body is not an AdmissionReview: %v", err)
		}
		objectErr = err
	}
	if rev.APIVersion != admissionv1.SchemeGroupVersion.String() || rev.Kind != "AdmissionReview" {
		return nil, badRequest("the body is apiVersion %q kind %q; expected an AdmissionReview of %s",
			rev.APIVersion, rev.Kind, admissionv1.SchemeGroupVersion)
	}
	req := rev.Request
	if req == nil {
		return nil, badRequest("the AdmissionReview has no request")
	}
	if req.UID == "" {
		return nil, badRequest("the AdmissionReview's request has no uid")
	}

	log := logf.FromContext(ctx)
	kv := []any{"uid", req.UID, "namespace", req.Namespace, "name", objectName(req)}
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	d := mutate.Decision{Outcome: mutate.OutcomeSkippedNotFlyte, Container: -1}
	switch {
	case req.Kind.Group != mpiJobGroup || req.Kind.Kind != mpiJobKind || !slices.Contains(mpiJobVersions, req.Kind.Version):
		log.V(1).Info("not an MPIJob: allowed unchanged", append(kv, "kind", req.Kind)...)
	case req.Operation != admissionv1.Create:
		log.V(1).Info("not a create: allowed unchanged", append(kv, "operation", req.Operation)...)
	case req.SubResource != "" || req.Resource.Resource != mpiJobResource:
		log.V(1).Info("not the mpijobs resource: allowed unchanged", append(kv, "resource", req.Resource, "subResource", req.SubResource)...)
	case objectErr != nil:
		d.Outcome = mutate.OutcomeUnchanged
		resp.Warnings = []string{"the MPIJob could not be read, so no worker command was injected: " + objectErr.Error()}
		log.Info("unreadable MPIJob: allowed unchanged", append(kv, "error", objectErr.Error())...)
	case req.Object == nil:
		d.Outcome = OutcomeMalformed
		deny(resp, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the AdmissionReview's request has no object to create")
	case req.Object.Kind != req.Kind.Kind || req.Object.APIVersion != req.Kind.Group+"/"+req.Kind.Version:
		d.Outcome = OutcomeMalformed
		deny(resp, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf(
			"the object is apiVersion %q kind %q, but the request is for %s", req.Object.APIVersion, req.Object.Kind, req.Kind))
	default:
		d = mutate.Decide(req.Object, h.Options)
		if err := respond(resp, d, req.Object); err != nil {
			return nil, err
		}
		logDecision(log, kv, d, req.DryRun)
	}
	h.observe(d)
	return json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: resp,
	})
}

// respond writes decision d on job into resp.
func respond(resp *admissionv1.AdmissionResponse, d mutate.Decision, job *mutate.Job) error {
	resp.Warnings = d.Warnings
	switch d.Outcome {
	case mutate.OutcomeDeniedInvalid:
		// 422 Invalid, not 403 Forbidden: flytepropeller fails a task whose
		// create is Invalid (or BadRequest) at once, as BadTaskFormat, where a
		// Forbidden one is retried, and denied again, for every retry. The
		// details are apierrors.NewInvalid's, so that kubectl prints the job
		// and the annotation's path.
		deny(resp, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, d.Err.Error())
		if annotationErr, ok := errors.AsType[*mutate.AnnotationError](d.Err); ok {
			resp.Result.Details = &metav1.StatusDetails{Group: mpiJobGroup, Kind: mpiJobKind, Name: job.Metadata.Name, Causes: []metav1.StatusCause{{
				Type:    metav1.CauseTypeFieldValueInvalid,
				Field:   annotationField(job, annotationErr.Key).String(),
				Message: annotationErr.Err.Error(),
			}}}
		}
	case mutate.OutcomeMutated:
		patch, err := json.Marshal(d.Patch)
		if err != nil {
			return fmt.Errorf("encoding the patch: %w", err)
		}
		patchType := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &patchType
	}
	return nil
}

// annotationField is the path of annotation key where Decide read it: the
// MPIJob's own annotations win over the Worker pod template's, as in Decide.
func annotationField(job *mutate.Job, key string) *field.Path {
	if _, ok := job.Metadata.Annotations[key]; ok || job.Spec.MPIReplicaSpecs.Worker == nil {
		return field.NewPath("metadata", "annotations").Key(key)
	}
	return field.NewPath("spec", "mpiReplicaSpecs", "Worker", "template", "metadata", "annotations").Key(key)
}

func deny(resp *admissionv1.AdmissionResponse, code int32, reason metav1.StatusReason, message string) {
	resp.Allowed = false
	resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message}
}

func logDecision(log interface {
	Info(string, ...any)
}, kv []any, d mutate.Decision, dryRun *bool) {
	kv = append(kv, "outcome", d.Outcome, "source", d.Source, "container", d.ContainerName)
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

func objectName(req *request) string {
	if req.Name != "" || req.Object == nil {
		return req.Name
	}
	return req.Object.Metadata.Name
}

// refuse answers a request that is no review the handler can read with an
// HTTP error, and counts it as malformed.
func (h *Handler) refuse(w http.ResponseWriter, message string, code int) {
	h.observe(mutate.Decision{Outcome: OutcomeMalformed, Container: -1})
	http.Error(w, message, code)
}

func (h *Handler) observe(d mutate.Decision) {
	if h.Observe != nil {
		h.Observe(d)
	}
}
