package admission

import (
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kjson "sigs.k8s.io/json"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/internal/truncate"
)

// The AdmissionReview that the one pass reads, as the API server sends it.
const (
	reviewAPIVersion = "admission.k8s.io/v1"
	reviewKind       = "AdmissionReview"
)

// review is an AdmissionReview read for its decision: one allocation holds it.
type review struct {
	// typeMeta is the review's own, which the answer carries.
	typeMeta metav1.TypeMeta
	request  *admissionv1.AdmissionRequest
	// job is the request's object; jobErr says why it could not be read.
	// Both are nil for a request that carries none.
	job    *mutate.Job
	jobErr error
	// wire and decoded are what the one pass decodes into: decoded is the
	// request answered, whose Object is job's once decoded.
	wire    reviewWire
	decoded requestWire
	// response is what is written, in a review of typeMeta.
	response admissionv1.AdmissionResponse
}

// refusal is why a body cannot be decided on: the answer's code and
// message (err), and what the log says of it (why).
type refusal struct {
	code int32
	err  error
	why  string
}

// readReview decodes body, r's: in one pass (decodeReview), or, for a body
// that pass cannot read, with the codec (decodeOther). It refuses a request
// as controller-runtime's admission.Webhook does, in the same order.
func (h *Handler) readReview(r *http.Request, body []byte) (*review, *refusal) {
	if contentType := r.Header.Get("Content-Type"); contentType != "application/json" {
		return nil, &refusal{http.StatusBadRequest, fmt.Errorf("contentType=%s, expected application/json", contentType),
			"unable to process a request with unknown content type"}
	}
	if rv, err := decodeReview(body, h.jobs); err == nil {
		return rv, nil
	}
	rv, err := decodeOther(body, h.jobs)
	if err != nil {
		return nil, &refusal{http.StatusBadRequest, err, "unable to decode the request"}
	}
	return rv, nil
}

// errNotReviewOfObject is decodeReview's error for a body that decodes, but
// is not an AdmissionReview of reviewAPIVersion with a request and an object.
var errNotReviewOfObject = errors.New("not an " + reviewAPIVersion + " " + reviewKind + " with a request and an object")

// decodeReview decodes an AdmissionReview and its request's object in one
// pass, as the API machinery's codec decodes its request (case-sensitive,
// integers kept), with the object decoded as jobs.Decode does: a review
// costs about what decoding its bytes once does. It fails on every body
// that is not an AdmissionReview of reviewAPIVersion with a request and an
// object, and on a field of the wrong JSON type, the object's included:
// those are the codec's to read (decodeOther), and the decision's to meet
// as it does.
func decodeReview(body []byte, jobs *mutate.JobDecoder) (*review, error) {
	rv := &review{}
	object := jobs.Target()
	rv.decoded.Object = object.Into()
	rv.wire.Request = &rv.decoded // null sets it nil; absent leaves it, and the object absent too
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &rv.wire); err != nil {
		return nil, fmt.Errorf("decoding the AdmissionReview: %w", err)
	}
	rv.job = object.Job() // nil when the object was null or absent
	if rv.wire.APIVersion != reviewAPIVersion || rv.wire.Kind != reviewKind || rv.wire.Request == nil || rv.job == nil {
		return nil, fmt.Errorf("decoding the AdmissionReview of apiVersion %s kind %s: %w",
			truncate.Quoted(rv.wire.APIVersion, truncate.MaxQuotedBytes), truncate.Quoted(rv.wire.Kind, truncate.MaxQuotedBytes), errNotReviewOfObject)
	}
	rv.typeMeta = metav1.TypeMeta{APIVersion: reviewAPIVersion, Kind: reviewKind}
	rv.request = &rv.decoded.AdmissionRequest
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

// codecs is the API machinery's codec for admission.k8s.io, as
// controller-runtime's admission.Webhook decodes with it.
var codecs = func() serializer.CodecFactory {
	scheme := runtime.NewScheme()
	utilruntime.Must(admissionv1.AddToScheme(scheme))
	utilruntime.Must(admissionv1beta1.AddToScheme(scheme))
	return serializer.NewCodecFactory(scheme)
}()

// decodeOther reads a body that the one pass could not, as controller-runtime's
// admission.Webhook reads every body: with the API machinery's codec, which
// takes any AdmissionReview (v1beta1, without a request or object, with an
// object of the wrong shape; even YAML) and words its refusal of the rest.
// No API server sends such a body, so its cost does not matter; its answer
// must be the Webhook's.
func decodeOther(body []byte, jobs *mutate.JobDecoder) (*review, error) {
	rv := &review{request: &admissionv1.AdmissionRequest{}}
	// The codec guesses the type to decode into by its name unless it is
	// set: an unregistered type, set to v1's kind, takes v1beta1 too.
	into := &anyReview{}
	into.Request = rv.request
	into.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind(reviewKind))
	_, gvk, err := codecs.UniversalDeserializer().Decode(body, nil, into)
	if err != nil {
		return nil, err
	}
	rv.typeMeta = metav1.TypeMeta{APIVersion: reviewAPIVersion, Kind: reviewKind}
	if !gvk.Empty() {
		rv.typeMeta.APIVersion, rv.typeMeta.Kind = gvk.ToAPIVersionAndKind()
	}
	rv.job, rv.jobErr = decodeObject(rv.request, jobs)
	return rv, nil
}

// decodeObject decodes req's object, the MPIJob it creates: nil, nil when
// it carries none.
func decodeObject(req *admissionv1.AdmissionRequest, jobs *mutate.JobDecoder) (*mutate.Job, error) {
	if len(req.Object.Raw) == 0 {
		return nil, nil
	}
	return jobs.Decode(req.Object.Raw)
}

// anyReview is an AdmissionReview of any version for the codec (decodeOther).
type anyReview struct{ admissionv1.AdmissionReview }

var _ runtime.Object = &anyReview{}

func (r *anyReview) DeepCopyObject() runtime.Object {
	return &anyReview{AdmissionReview: *r.DeepCopy()}
}
