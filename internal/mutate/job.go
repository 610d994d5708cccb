package mutate

import (
	"encoding/json"
	"strings"

	"github.com/go-openapi/jsonpointer"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Job is the part of an MPIJob that Decide reads. kubeflow.org/v1 and
// kubeflow.org/v2beta1 agree on every path in it, and every field the webhook
// does not read is left out, so decoding skips it and the patch never
// rewrites it.
type Job struct {
	APIVersion string   `json:"apiVersion,omitempty"`
	Kind       string   `json:"kind,omitempty"`
	Metadata   Metadata `json:"metadata"`
	Spec       JobSpec  `json:"spec"`
}

// Metadata is the part of an object's or a pod template's metadata that Decide reads.
type Metadata struct {
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// JobSpec holds the MPIJob's replica specs.
type JobSpec struct {
	MPIReplicaSpecs ReplicaSpecs `json:"mpiReplicaSpecs"`
}

// ReplicaSpecs holds the one replica type the webhook changes.
type ReplicaSpecs struct {
	Worker *ReplicaSpec `json:"Worker,omitempty"`
}

// ReplicaSpec is a replica type's pod template.
type ReplicaSpec struct {
	Template PodTemplate `json:"template"`
}

// PodTemplate is a replica's pod template.
type PodTemplate struct {
	Metadata Metadata `json:"metadata"`
	Spec     PodSpec  `json:"spec"`
}

// PodSpec holds the containers of a pod template.
type PodSpec struct {
	Containers []Container `json:"containers"`
}

// Container is a container's name, command and args.
type Container struct {
	Name    string `json:"name"`
	Command Words  `json:"command"`
	Args    Words  `json:"args"`
}

// Words is a container's command or args. It remembers whether the field was
// present at all, so that a patch removes only what exists.
type Words struct {
	Present bool
	Values  []string
}

// UnmarshalJSON records that the field was present, even as null.
func (w *Words) UnmarshalJSON(b []byte) error {
	w.Present = true
	return json.Unmarshal(b, &w.Values)
}

// MarshalJSON writes the words as a JSON list, or null when absent.
func (w Words) MarshalJSON() ([]byte, error) {
	if !w.Present {
		return []byte("null"), nil
	}
	return json.Marshal(w.Values)
}

// workerContainers is where both MPIJob versions keep the worker's containers.
var workerContainers = []string{"spec", "mpiReplicaSpecs", "Worker", "template", "spec", "containers"}

// workerContainersField is workerContainers as a field path, for messages.
var workerContainersField = field.NewPath(workerContainers[0], workerContainers[1:]...)

// jsonPointer joins path segments into an RFC 6901 JSON pointer.
func jsonPointer(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(jsonpointer.Escape(s))
	}
	return b.String()
}
