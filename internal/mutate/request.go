package mutate

import (
	"fmt"
	"reflect"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
)

// The MPIJob resource, as an admission request names it: the one place the
// webhook, its preview and its tests take it from.
const (
	MPIJobGroup    = "kubeflow.org"
	MPIJobKind     = "MPIJob"
	MPIJobResource = "mpijobs"
)

// MPIJobVersions are the MPIJob versions whose replicas sit at the paths Job
// decodes and the patch writes: the training-operator's and mpi-operator's.
var MPIJobVersions = []string{"v1", "v2beta1"}

// OutcomeMalformed: the request is no MPIJob creation that can be read; the
// object is refused as a bad request, and no decision is made on it.
const OutcomeMalformed Outcome = "malformed"

// Decider decides on admission requests with its Options. NewDecider makes
// once what decoding with them takes.
type Decider struct {
	opts   Options
	jobs   jobDecoder
	review reflect.Type // of reviewWire's shape, with jobs' type as the object (see newReviewType)
}

// NewDecider returns the Decider of opts.
func NewDecider(opts Options) *Decider {
	jobs := newJobDecoder(opts.FlyteTaskSelector)
	return &Decider{opts: opts, jobs: jobs, review: newReviewType(jobs.typ)}
}

// Decide decides on an admission request: the creation of an MPIJob is
// decoded and given to Decide; every other request, and any request for a
// subresource, is allowed unchanged.
func (d *Decider) Decide(req *admissionv1.AdmissionRequest) Decision {
	return d.DecideJob(req, nil)
}

// DecideJob decides on req as Decide does, with job as its object when job
// is not nil (DecodeReview decoded it), else decoding req.Object.
func (d *Decider) DecideJob(req *admissionv1.AdmissionRequest, job *Job) Decision {
	skip := Decision{Outcome: OutcomeSkippedNotFlyte, Container: -1}
	switch {
	case req.Kind.Group != MPIJobGroup || req.Kind.Kind != MPIJobKind || !slices.Contains(MPIJobVersions, req.Kind.Version):
		return skip // not an MPIJob of a version the patch fits
	case req.Operation != admissionv1.Create:
		return skip // the worker command is decided once, when the job is created
	case req.SubResource != "" || req.Resource.Resource != MPIJobResource:
		return skip // a status update or another resource of the same kind
	}
	if job == nil {
		if len(req.Object.Raw) == 0 {
			return malformed(fmt.Errorf("the AdmissionReview's request has no object to create"))
		}
		var err error
		if job, err = d.jobs.decode(req.Object.Raw); err != nil {
			// A field Decide reads has the wrong JSON type: the API server's
			// validation refuses the object itself, with a message that says where.
			return Decision{Outcome: OutcomeUnchanged, Container: -1, Warnings: []string{
				"the MPIJob could not be read, so no worker command was injected: " + err.Error()}}
		}
	}
	if want := req.Kind.Group + "/" + req.Kind.Version; job.APIVersion != want || job.Kind != req.Kind.Kind {
		return malformed(fmt.Errorf("the object is apiVersion %s kind %s, but the request is for %s %s",
			quote(job.APIVersion), quote(job.Kind), want, req.Kind.Kind))
	}
	return Decide(job, d.opts)
}

func malformed(err error) Decision {
	return Decision{Outcome: OutcomeMalformed, Container: -1, Err: err}
}
