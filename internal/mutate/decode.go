package mutate

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
)

// JobDecoder decodes an MPIJob as the API server sends it, keeping only what
// Decide reads: of the labels, those its selector reads; of the annotations,
// this webhook's (Annotations); of each replica's containers, the first
// MaxContainers (Containers). Every other label, annotation and container is
// skipped without being allocated, so that a review costs about what its
// bytes do, whatever they hold.
//
// It decodes in one pass of the JSON decoder, into a type made for the
// selector's label keys: a struct field per key, beside the fixed fields of
// jobWire. A struct skips every member it has no field for without
// allocating it, where a map, or a custom unmarshaler, would hold it or scan
// it again.
type JobDecoder struct {
	labelKeys []string
	// typ is struct{ jobWire; Metadata struct{ metadataWire; Labels struct{ K0 *string `json:"key0"`; ... } } }:
	// the outer Metadata shadows jobWire's, which has no labels.
	typ reflect.Type
	// ptr is *typ, which a Target holds a pointer to.
	ptr reflect.Type
}

// NewJobDecoder returns the decoder of the labels selector reads: give
// Decide the jobs it decodes with Options whose FlyteTaskSelector is
// selector. reflect.StructOf costs more than a decode: make one and keep it.
func NewJobDecoder(selector labels.Selector) *JobDecoder {
	requirements, _ := selector.Requirements()
	var keys []string
	for _, r := range requirements {
		if !slices.Contains(keys, r.Key()) {
			keys = append(keys, r.Key())
		}
	}
	fields := make([]reflect.StructField, len(keys))
	for i, key := range keys {
		// Label keys hold no quote or comma, which a tag cannot.
		fields[i] = reflect.StructField{Name: "K" + strconv.Itoa(i), Type: reflect.TypeFor[*string](),
			Tag: reflect.StructTag(`json:"` + key + `"`)}
	}
	metadata := reflect.StructOf([]reflect.StructField{
		{Name: "MetadataWire", Type: reflect.TypeFor[metadataWire](), Anonymous: true},
		{Name: "Labels", Type: reflect.StructOf(fields), Tag: `json:"labels"`},
	})
	typ := reflect.StructOf([]reflect.StructField{
		{Name: "JobWire", Type: reflect.TypeFor[jobWire](), Anonymous: true},
		{Name: "Metadata", Type: metadata, Tag: `json:"metadata"`},
	})
	return &JobDecoder{labelKeys: keys, typ: typ, ptr: reflect.PointerTo(typ)}
}

// Decode decodes raw, an MPIJob.
func (d *JobDecoder) Decode(raw []byte) (*Job, error) {
	decoded := reflect.New(d.typ)
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, decoded.Interface()); err != nil {
		if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			// Name the field by its path in the MPIJob, not through the types made here.
			typeErr.Struct = "Job"
			typeErr.Field = strings.NewReplacer("JobWire.", "", "MetadataWire.", "").Replace(typeErr.Field)
		}
		return nil, err // the caller says what could not be read: the json error names the field
	}
	return d.job(decoded.Elem()), nil
}

// Target returns a place for a JSON decoder (sigs.k8s.io/json, or
// encoding/json) to decode an MPIJob into as Decode does, in the same pass
// as the document that holds it: an AdmissionReview, whose request's object
// is the job.
func (d *JobDecoder) Target() JobTarget {
	return JobTarget{decoder: d, decoded: reflect.New(d.ptr)}
}

// JobTarget is where a JSON decoder decodes an MPIJob that a larger
// document holds. Put Into() in the document's field for the job, a field
// of type any: the JSON decoder decodes into the pointer such a field holds.
type JobTarget struct {
	decoder *JobDecoder
	// decoded is a **typ: the JSON decoder allocates the *typ when it meets
	// an object, and leaves it nil for null or for no member at all.
	decoded reflect.Value
}

// Into is the value to put in the document's field for the job.
func (t JobTarget) Into() any { return t.decoded.Interface() }

// Job returns the Job decoded into t; nil when the document held null, or
// nothing, where the job would be.
func (t JobTarget) Job() *Job {
	if t.decoded.Elem().IsNil() {
		return nil
	}
	return t.decoder.job(t.decoded.Elem().Elem())
}

// job returns the Job that decoded, a value of d.typ, holds.
func (d *JobDecoder) job(decoded reflect.Value) *Job {
	wire, metadata := decoded.Field(0).Addr().Interface().(*jobWire), decoded.Field(1)
	job := &Job{APIVersion: wire.APIVersion, Kind: wire.Kind, Spec: JobSpec{MPIReplicaSpecs: ReplicaSpecs{
		Launcher: wire.Spec.MPIReplicaSpecs.Launcher.replicaSpec(), Worker: wire.Spec.MPIReplicaSpecs.Worker.replicaSpec()}}}
	m := metadata.Field(0).Addr().Interface().(*metadataWire)
	job.Metadata = Metadata{Name: m.Name, Namespace: m.Namespace, Annotations: m.Annotations.annotations(),
		Labels: make(map[string]string, len(d.labelKeys))}
	for i, key := range d.labelKeys {
		if value := metadata.Field(1).Field(i).Interface().(*string); value != nil {
			job.Metadata.Labels[key] = *value
		}
	}
	return job
}

// jobWire, metadataWire, replicaWire and annotationsWire are the JSON of
// Job's parts. They have no unmarshaler of their own: each is decoded in
// the one pass over the object.
type jobWire struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   metadataWire `json:"metadata"`
	Spec       struct {
		MPIReplicaSpecs struct {
			Launcher *replicaWire `json:"Launcher"`
			Worker   *replicaWire `json:"Worker"`
		} `json:"mpiReplicaSpecs"`
	} `json:"spec"`
}

type metadataWire struct {
	Name        string           `json:"name"`
	Namespace   string           `json:"namespace"`
	Annotations *annotationsWire `json:"annotations"`
}

type replicaWire struct {
	Template struct {
		Metadata struct {
			Annotations *annotationsWire `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			// A Go array takes the first elements of a JSON array and skips
			// the rest unallocated; the pointer tells [] from null.
			Containers *[MaxContainers]*Container `json:"containers"`
		} `json:"spec"`
	} `json:"template"`
}

// annotationsWire holds this webhook's annotations, the keys of keys.go.
type annotationsWire struct {
	TaskCustom          *string `json:"mpi.flyte.org/task-custom"`
	TaskTypeVersion     *string `json:"mpi.flyte.org/task-type-version"`
	WorkerSpecCommand   *string `json:"mpi.flyte.org/worker-spec-command"`
	WorkerCommandSource *string `json:"mpi.flyte.org/worker-command-source"`
}

// annotations returns a's annotations found; nil when the object was absent or null.
func (a *annotationsWire) annotations() Annotations {
	if a == nil {
		return nil
	}
	found := Annotations{}
	for _, annotation := range [...]struct {
		key   string
		value *string
	}{{AnnotationTaskCustom, a.TaskCustom}, {AnnotationTaskTypeVersion, a.TaskTypeVersion},
		{AnnotationWorkerSpecCommand, a.WorkerSpecCommand}, {AnnotationWorkerCommandSource, a.WorkerCommandSource}} {
		if annotation.value != nil {
			found[annotation.key] = *annotation.value
		}
	}
	return found
}

// replicaSpec returns r as Decide reads it; nil when absent or null.
func (r *replicaWire) replicaSpec() *ReplicaSpec {
	if r == nil {
		return nil
	}
	spec := &ReplicaSpec{Template: PodTemplate{Metadata: TemplateMetadata{Annotations: r.Template.Metadata.Annotations.annotations()}}}
	if first := r.Template.Spec.Containers; first != nil {
		n := slices.Index(first[:], nil) // a null element ends them, as the API server would refuse it
		if n < 0 {
			n = MaxContainers
		}
		spec.Template.Spec.Containers = make(Containers, n)
		for i, container := range first[:n] {
			spec.Template.Spec.Containers[i] = *container
		}
	}
	return spec
}

// Annotations are an object's or a pod template's annotations, as far as
// Decide reads them: this webhook's keys. A present annotations object is
// never nil, for the patch adds the source annotation to it.
type Annotations map[string]string
