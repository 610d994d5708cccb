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

// DecodeJob decodes an MPIJob as the API server sends it, keeping only what
// Decide reads with selector: of the labels, those the selector reads; of
// the annotations, this webhook's (Annotations); of each replica's
// containers, the first MaxContainers (Containers). Every other label,
// annotation and container is skipped without being allocated, so that a
// review costs about what its bytes do, whatever they hold.
func DecodeJob(raw []byte, selector labels.Selector) (*Job, error) {
	return newJobDecoder(selector).decode(raw)
}

// jobDecoder decodes the parts of an MPIJob that Decide reads in one pass
// of the JSON decoder, into a type made for the selector's label keys: a
// struct field per key, beside the fixed fields of jobWire. A struct skips
// every member it has no field for without allocating it, where a map, or a
// custom unmarshaler, would hold it or scan it again.
type jobDecoder struct {
	labelKeys []string
	// typ is struct{ jobWire; Metadata struct{ metadataWire; Labels struct{ K0 *string `json:"key0"`; ... } } }:
	// the outer Metadata shadows jobWire's, which has no labels.
	typ reflect.Type
}

// newJobDecoder returns the decoder of the labels selector reads.
// reflect.StructOf costs more than a decode: a Decider makes it once.
func newJobDecoder(selector labels.Selector) jobDecoder {
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
	return jobDecoder{labelKeys: keys, typ: reflect.StructOf([]reflect.StructField{
		{Name: "JobWire", Type: reflect.TypeFor[jobWire](), Anonymous: true},
		{Name: "Metadata", Type: metadata, Tag: `json:"metadata"`},
	})}
}

// decode decodes raw, an MPIJob.
func (d jobDecoder) decode(raw []byte) (*Job, error) {
	decoded := reflect.New(d.typ)
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, decoded.Interface()); err != nil {
		if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			// Name the field by its path in the MPIJob, not through the types made here.
			typeErr.Struct = "Job"
			typeErr.Field = strings.NewReplacer("JobWire.", "", "MetadataWire.", "").Replace(typeErr.Field)
		}
		return nil, err
	}
	return d.job(decoded.Elem()), nil
}

// job returns the Job that decoded, a value of d.typ, holds.
func (d jobDecoder) job(decoded reflect.Value) *Job {
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

// annotationsWire holds this webhook's annotations, the keys of options.go.
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
