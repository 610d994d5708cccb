package admission

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "sigs.k8s.io/json"

	"github.com/flyteorg/flyte-mpi-webhook/internal/mutate"
	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
)

// TestDecodeReview checks that decodeReview reads a review's request as the
// codec does, and its object as a JobDecoder does, for every job Flyte's
// backend built; and that it refuses what its caller must leave to the codec (decodeOther).
func TestDecodeReview(t *testing.T) {
	jobs := mutate.NewJobDecoder(mutate.DefaultOptions().FlyteTaskSelector)
	for _, version := range mutate.MPIJobVersions {
		names, err := fixtures.FlyteJobNames(version)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			t.Run(version+"/"+name, func(t *testing.T) {
				job, err := fixtures.FlyteJob(version, name)
				if err != nil {
					t.Fatal(err)
				}
				object := fixtures.MustJSON(job)
				body := fixtures.Review(object, fixtures.MPIJob(version), admissionv1.Create, fixtures.DryRun(),
					fixtures.OldObject(object))
				var want admissionv1.AdmissionReview
				if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &want); err != nil {
					t.Fatal(err)
				}
				wantJob, err := jobs.Decode(want.Request.Object.Raw)
				if err != nil {
					t.Fatal(err)
				}
				want.Request.Object = runtime.RawExtension{} // the job holds it
				got, err := decodeReview(body, jobs)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(*want.Request, *got.request); diff != "" {
					t.Errorf("request (-codec +decodeReview):\n%s", diff)
				}
				if diff := cmp.Diff(wantJob, got.job); diff != "" {
					t.Errorf("job (-JobDecoder +decodeReview):\n%s", diff)
				}
			})
		}
	}

	review := func(apiVersion, request string) []byte {
		return []byte(`{"apiVersion":"` + apiVersion + `","kind":"AdmissionReview"` + request + `}`)
	}
	const object = `"object":{"apiVersion":"kubeflow.org/v1","kind":"MPIJob"}`
	for _, tt := range []struct {
		name        string
		body        []byte
		notOfObject bool // the body decodes, but is no review decodeReview reads
	}{
		{"admission.k8s.io/v1beta1", review("admission.k8s.io/v1beta1", `,"request":{`+object+`}`), true},
		{"another kind", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"ConversionReview","request":{` + object + `}}`), true},
		{"a case-variant apiVersion key", []byte(`{"APIVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{` + object + `}}`), true},
		{"no request", review("admission.k8s.io/v1", ``), true},
		{"a null request", review("admission.k8s.io/v1", `,"request":null`), true},
		{"no object", review("admission.k8s.io/v1", `,"request":{"uid":"u"}`), true},
		{"a null object", review("admission.k8s.io/v1", `,"request":{"object":null}`), true},
		{"an object that is a string", review("admission.k8s.io/v1", `,"request":{"object":"MPIJob"}`), false},
		{"containers that are a string", review("admission.k8s.io/v1", `,"request":{"object":{"spec":{"mpiReplicaSpecs":{"Worker":{"template":{"spec":{"containers":"c"}}}}}}}`), false},
		{"userInfo that is a list", review("admission.k8s.io/v1", `,"request":{"userInfo":[],`+object+`}`), false},
		{"a uid that is a number", review("admission.k8s.io/v1", `,"request":{"uid":7,`+object+`}`), false},
		{"a response that is a string", review("admission.k8s.io/v1", `,"request":{`+object+`},"response":"r"`), false},
		{"garbage after the review", append(review("admission.k8s.io/v1", `,"request":{`+object+`}`), '}'), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeReview(tt.body, jobs); err == nil || errors.Is(err, errNotReviewOfObject) != tt.notOfObject {
				t.Errorf("error %v; want one that is errNotReviewOfObject: %t", err, tt.notOfObject)
			}
		})
	}
}

// TestDecodeReviewAllocatesForWhatItKeeps checks that decodeReview, like a
// JobDecoder, allocates no more for a flood of containers, labels and
// annotations than for a handful.
func TestDecodeReviewAllocatesForWhatItKeeps(t *testing.T) {
	flood := func(n int) []byte {
		return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":` +
			string(fixtures.FloodedMPIJob(n)) + `}}`)
	}
	jobs := mutate.NewJobDecoder(mutate.DefaultOptions().FlyteTaskSelector)
	allocs := func(body []byte) float64 {
		return testing.AllocsPerRun(5, func() {
			if _, err := decodeReview(body, jobs); err != nil {
				t.Fatal(err)
			}
		})
	}
	few, lots := allocs(flood(mutate.MaxContainers)), allocs(flood(100*mutate.MaxContainers))
	if lots > few+10 {
		t.Errorf("%v allocations for %d containers, labels and annotations; %v for %d", lots, 100*mutate.MaxContainers, few, mutate.MaxContainers)
	}
}
