package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kjson "sigs.k8s.io/json"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/truncate"
)

// The AdmissionReview that the one pass reads, as the API server sends it.
const (
	reviewAPIVersion = "admission.k8s.io/v1"
	reviewKind       = "AdmissionReview"
)

// maxWebhookBodyBytes is the most of a body that controller-runtime's
// admission.Webhook reads (its maxRequestSize): it refuses a body that
// reaches it, so readBody reads no more, and leaves such a body to the
// Webhook. internal/server refuses bodies far smaller (server.MaxBodyBytes)
// before they reach the handler.
const maxWebhookBodyBytes = 7 << 20

// errNotReviewOfObject is decodeReview's error for a body that decodes, but
// is not an AdmissionReview of reviewAPIVersion with a request and an object.
var errNotReviewOfObject = errors.New("not an " + reviewAPIVersion + " " + reviewKind + " with a request and an object")

// review is an AdmissionReview that the one pass read: one allocation
// holds it.
type review struct {
	// wire and request are what the one pass decodes into: request is the
	// request answered, whose Object is job's once decoded.
	wire    reviewWire
	request requestWire
	job     *mutate.Job
}

// readReview reads r's body and decodes it with decodeReview. When it
// fails, r's body reads again from its start, for admission.Webhook.
func readReview(r *http.Request, jobs *mutate.JobDecoder) (*review, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return decodeReview(body, jobs)
}

// decodeReview decodes an AdmissionReview and its request's object in one
// pass, as the API machinery's codec decodes its request (case-sensitive,
// integers kept), with the object decoded as jobs.Decode does: a review
// costs about what decoding its bytes once does. It fails on every body
// that is not an AdmissionReview of reviewAPIVersion with a request and an
// object, and on a field of the wrong JSON type, the object's included:
// those are the codec's to read, and the decision's to meet as it does.
func decodeReview(body []byte, jobs *mutate.JobDecoder) (*review, error) {
	rv := &review{}
	object := jobs.Target()
	rv.request.Object = object.Into()
	rv.wire.Request = &rv.request // null sets it nil; absent leaves it, and the object absent too
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &rv.wire); err != nil {
		return nil, fmt.Errorf("decoding the AdmissionReview: %w", err)
	}
	rv.job = object.Job() // nil when the object was null or absent
	if rv.wire.APIVersion != reviewAPIVersion || rv.wire.Kind != reviewKind || rv.wire.Request == nil || rv.job == nil {
		return nil, fmt.Errorf("decoding the AdmissionReview of apiVersion %s kind %s: %w",
			truncate.Quoted(rv.wire.APIVersion, truncate.MaxQuotedBytes), truncate.Quoted(rv.wire.Kind, truncate.MaxQuotedBytes), errNotReviewOfObject)
	}
	return rv, nil
}

// reviewWire is an AdmissionReview as the one pass decodes it. Its response
// is decoded, though never read, so that a response of the wrong type fails
// as it does in the codec.
type reviewWire struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Request    *requestWire                   `json:"request"`
	Response   *admissionv1.AdmissionResponse `json:"response"`
}

// requestWire is an admission request whose object is decoded as an MPIJob
// (a mutate.JobTarget's), in place of its bytes. The outer Object shadows
// AdmissionRequest's, one level deeper, so every other field of the request
// decodes as in admissionv1.AdmissionRequest.
type requestWire struct {
	admissionv1.AdmissionRequest
	Object any `json:"object"`
}

// errBodyLeft is readBody's error for a body that reaches maxWebhookBodyBytes.
var errBodyLeft = errors.New("the body reaches admission.Webhook's limit")

// readBody reads r's body in one allocation of its Content-Length. When it
// fails, or the body reaches maxWebhookBodyBytes, it puts back what it
// read, followed by the rest or the error, for admission.Webhook to meet
// alike; and when decodeReview fails, the Webhook reads the same bytes.
func readBody(r *http.Request) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(int(min(max(r.ContentLength, 0), maxWebhookBodyBytes)) + bytes.MinRead) // MinRead: space for ReadFrom's EOF
	_, err := buf.ReadFrom(io.LimitReader(r.Body, maxWebhookBodyBytes))
	rest := r.Body
	switch {
	case err != nil:
		rest = io.NopCloser(&failingReader{err})
	case buf.Len() >= maxWebhookBodyBytes:
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

// writeReview writes resp to w as admission.Webhook writes its answer to an
// admission.k8s.io/v1 review (its writeResponseTyped and
// writeAdmissionResponse, unexported), with the same logs on log: the
// Webhook writes only the answers to what it decoded itself. It is the one
// copy of controller-runtime's code in the webhook, and
// TestOnePassAnswersAsWebhook holds it equal to the Webhook's.
func writeReview(w io.Writer, resp ctrladmission.Response, log logr.Logger) {
	answer := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: reviewAPIVersion, Kind: reviewKind},
		Response: &resp.AdmissionResponse}
	if err := json.NewEncoder(w).Encode(answer); err != nil {
		// The connection broke: the Webhook tries once more, with a 500.
		log.Error(err, "unable to encode and write the response")
		serverError := ctrladmission.Errored(http.StatusInternalServerError, err)
		if err := json.NewEncoder(w).Encode(admissionv1.AdmissionReview{Response: &serverError.AdmissionResponse}); err != nil {
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
