package mutate

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
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

// Job is the part of an MPIJob that Decide reads. kubeflow.org/v1 and
// kubeflow.org/v2beta1 agree on every path in it, and every field the webhook
// does not read is left out: decoding skips it, and the patch never rewrites it.
type Job struct {
	APIVersion string   `json:"apiVersion,omitempty"`
	Kind       string   `json:"kind,omitempty"`
	Metadata   Metadata `json:"metadata"`
	Spec       JobSpec  `json:"spec"`
}

// Metadata is the part of an object's or a pod template's metadata that Decide reads.
type Metadata struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	// Labels are those that the Flyte task selector reads: JobDecoder sets them.
	Labels      map[string]string `json:"-"`
	Annotations Annotations       `json:"annotations,omitempty"`
}

// JobSpec holds the MPIJob's replica specs.
type JobSpec struct {
	MPIReplicaSpecs ReplicaSpecs `json:"mpiReplicaSpecs"`
}

// ReplicaSpecs holds the replica types Decide reads: it patches the Worker,
// and compares it with the Launcher to tell a declared worker command from a
// copy of the launcher's.
type ReplicaSpecs struct {
	Launcher *ReplicaSpec `json:"Launcher,omitempty"`
	Worker   *ReplicaSpec `json:"Worker,omitempty"`
}

// ReplicaSpec is a replica type's pod template.
type ReplicaSpec struct {
	Template PodTemplate `json:"template"`
}

// PodTemplate is a replica's pod template.
type PodTemplate struct {
	Metadata TemplateMetadata `json:"metadata"`
	Spec     PodSpec          `json:"spec"`
}

// TemplateMetadata is the part of a pod template's metadata that Decide reads.
type TemplateMetadata struct {
	Annotations Annotations `json:"annotations,omitempty"`
}

// PodSpec holds the containers of a pod template.
type PodSpec struct {
	Containers Containers `json:"containers"`
}

// MaxContainers is how many of a pod template's containers Job decodes.
// Decide reads the first, and the others' names only to warn about an MPI
// container that is not first; a pod has a handful.
const MaxContainers = 64

// Containers is a pod template's first MaxContainers containers: JobDecoder
// skips the rest without allocating, so that a review of a million empty
// containers costs what one of MaxContainers does.
type Containers []Container

// Container is a container's name, command and args. Command and Args are
// nil when the field is absent (or null), so that a patch removes only what
// exists.
type Container struct {
	Name    string    `json:"name"`
	Command *[]string `json:"command,omitempty"`
	Args    *[]string `json:"args,omitempty"`
}

// mpiContainer returns the container that both MPI operators treat as the MPI
// container of a replica: the first. training-operator v1.8.1 gives a
// worker's the `sleep 365d` default of a container without command and the
// kubexec mount, and a launcher's the MPI environment; mpi-operator v0.8.2
// gives it the sshd default, the environment and the SSH-key mount. nil when
// the replica has no container.
func (r *ReplicaSpec) mpiContainer() *Container {
	if r == nil || len(r.Template.Spec.Containers) == 0 {
		return nil
	}
	return &r.Template.Spec.Containers[0]
}

// Field paths of what Decide reads and patches; both MPIJob versions share them.
var (
	replicaSpecsField     = field.NewPath("spec", "mpiReplicaSpecs")
	workerField           = replicaSpecsField.Child("Worker")
	launcherField         = replicaSpecsField.Child("Launcher")
	workerContainersField = workerField.Child("template", "spec", "containers")
	// annotationsField and workerAnnotationsField are where the annotations are read.
	annotationsField       = field.NewPath("metadata", "annotations")
	workerAnnotationsField = workerField.Child("template", "metadata", "annotations")
)

// jsonPointerEscape escapes a path segment for an RFC 6901 JSON pointer.
var jsonPointerEscape = strings.NewReplacer("~", "~0", "/", "~1")

// jsonPointer joins path segments into an RFC 6901 JSON pointer.
func jsonPointer(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(jsonPointerEscape.Replace(s))
	}
	return b.String()
}
