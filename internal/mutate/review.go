package mutate

import (
	"errors"
	"fmt"
	"reflect"

	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"
)

// The AdmissionReview that DecodeReview reads, as the API server sends it.
const (
	ReviewAPIVersion = "admission.k8s.io/v1"
	ReviewKind       = "AdmissionReview"
)

// ErrNotReviewOfObject is DecodeReview's error for a body that decodes, but
// is not an AdmissionReview of ReviewAPIVersion with a request and an object.
var ErrNotReviewOfObject = errors.New("not an " + ReviewAPIVersion + " " + ReviewKind + " with a request and an object")

// DecodeReview decodes an AdmissionReview and its request's object in one
// pass, as the API machinery's codec decodes its request (case-sensitive,
// integers kept), with the object decoded as DecodeJob does: a review costs
// about what decoding its bytes once does. Give the request and the job to
// DecideJob. It fails on every body that is not an AdmissionReview of
// ReviewAPIVersion with a request and an object, and on a field of the wrong
// JSON type, the object's included: read those as the codec and Decide do.
func (d *Decider) DecodeReview(body []byte) (*admissionv1.AdmissionRequest, *Job, error) {
	decoded := reflect.New(d.review)
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, decoded.Interface()); err != nil {
		return nil, nil, fmt.Errorf("decoding the AdmissionReview: %w", err)
	}
	review := decoded.Elem().Field(0).Addr().Interface().(*reviewWire)
	request := decoded.Elem().Field(1)
	if review.APIVersion != ReviewAPIVersion || review.Kind != ReviewKind || request.IsNil() || request.Elem().Field(1).IsNil() {
		return nil, nil, fmt.Errorf("decoding the AdmissionReview of apiVersion %s kind %s: %w",
			quote(review.APIVersion), quote(review.Kind), ErrNotReviewOfObject)
	}
	return request.Elem().Field(0).Addr().Interface().(*admissionv1.AdmissionRequest), d.jobs.job(request.Elem().Field(1).Elem()), nil
}

// reviewWire is the part of an AdmissionReview that newReviewType's type
// holds beside its request. The response is decoded, though never read, so
// that a response of the wrong type fails as it does in the codec.
type reviewWire struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Response   *admissionv1.AdmissionResponse `json:"response"`
}

// newReviewType returns the type of an AdmissionReview whose request's
// object is job, a jobDecoder's type:
//
//	struct{ reviewWire; Request *struct{ admissionv1.AdmissionRequest; Object *job `json:"object"` } `json:"request"` }
//
// The outer Object shadows AdmissionRequest's, one level deeper, so every
// other field of the request decodes as in admissionv1.AdmissionRequest.
func newReviewType(job reflect.Type) reflect.Type {
	request := reflect.StructOf([]reflect.StructField{
		{Name: "AdmissionRequest", Type: reflect.TypeFor[admissionv1.AdmissionRequest](), Anonymous: true},
		{Name: "Object", Type: reflect.PointerTo(job), Tag: `json:"object"`},
	})
	return reflect.StructOf([]reflect.StructField{
		{Name: "ReviewWire", Type: reflect.TypeFor[reviewWire](), Anonymous: true},
		{Name: "Request", Type: reflect.PointerTo(request), Tag: `json:"request"`},
	})
}
